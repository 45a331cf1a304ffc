"""Compile every bucketed step of a model before anything is timed (:mod:`specplan.runtime.compiled`)."""

from __future__ import annotations

import torch

from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.runtime.compiled import BUCKETS
from specplan.runtime.session import ModelSession


def compile_buckets(model: torch.nn.Module, device: torch.device, context_ids: list[int],
                    runtime: RuntimeMode = EAGER) -> float:
    """Compile every bucket's graph for ``model`` now, over a cache of ``context_ids``; the
    seconds spent compiling (0.0 when ``runtime`` is not compiled).

    Timed runs call this first so that no graph compiles inside a measurement (a tree round
    that first reaches a new width would otherwise pay the compile in the middle of a prompt)."""
    session = ModelSession(model, device, runtime=runtime)
    if not session.compiled:
        return 0.0
    before = session.compile_seconds
    context = list(context_ids)
    session.extend(context)
    filler = (context * (BUCKETS[-1] // max(1, len(context)) + 2))[: BUCKETS[-1]]
    for bucket in BUCKETS:
        session.extend(filler[:bucket])
        session.rewind_to(context + [0])
    return session.compile_seconds - before

