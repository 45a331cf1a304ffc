"""Compile every bucketed step of a model before anything is timed (:mod:`specplan.runtime.compile.compiled`)."""

from __future__ import annotations

import torch

from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.runtime.compile.model_steps import compile_every_width
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
    session.extend(list(context_ids))  # the prefill allocates the cache's buffers
    compile_every_width(session.step, session.cache)
    return session.compile_seconds - before
