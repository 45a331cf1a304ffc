"""Latency curve T_m(n): ms for one forward of n new tokens over a warm cache of
``context`` tokens (planner-math.md, Vocabulary), median of repeats after a warm-up.

The session is the runtime ``run`` executes (``SPECPLAN_RUNTIME``, :mod:`specplan.runtime.modes`)
unless ``session_options`` say otherwise; with compiled steps the warm-up of each width is
where its graph compiles, so compile time never enters a timed sample.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import torch

from specplan.profile import LatencyCurve
from specplan.runtime.session import ModelSession
from specplan.runtime.timing import time_ms

WIDTHS = (1, 2, 4, 8, 16, 32, 64)


def measure_latency(model: torch.nn.Module, device: torch.device, context_ids: Sequence[int],
                    widths: Sequence[int] = WIDTHS, repeats: int = 5,
                    progress: Callable[[], None] | None = None, **session_options) -> LatencyCurve:
    """Median ms per forward of each width over a cache holding ``context_ids``.

    The new tokens are taken from the context itself (their values do not change the cost);
    after each timed forward the cache is trimmed back to the context.
    """
    session = ModelSession(model, device, **session_options)
    context = list(context_ids)
    session.extend(context)
    filler = (context * (max(widths) // max(1, len(context)) + 2))[: max(widths)]
    medians = []
    for width in widths:
        tokens = filler[:width]
        samples = []
        for attempt in range(repeats + 1):  # the first is a warm-up
            elapsed = time_ms(lambda: session.extend(tokens), device)
            session.rewind_to(context + [0])  # keep exactly the context cached
            if attempt:
                samples.append(elapsed)
        medians.append(statistics.median(samples))
        if progress is not None:
            progress()
    return LatencyCurve(context=len(context), n=tuple(widths), ms=tuple(round(v, 4) for v in medians))
