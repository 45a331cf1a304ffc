"""The floor a plan is held against on llama.cpp: llama.cpp's own plain decoding on this machine.

A user who does not run specplan runs llama.cpp (llama-server, llama-cpp-python) with its own
settings: one-token decodes on every thread, weights repacked, flash attention as llama.cpp
chooses. That is the target session's ``fast`` numerics, so under fast numerics the floor is the
profile's own T(1); under ``exact`` numerics (one-token decodes on one thread) it is timed on a
second, fast session over the same cached context. The planner keeps speculation only where it
beats this floor (docs/planner-math.md section 9.1).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from specplan.core.profile import LatencyCurve
from specplan.models.load import LoadedModel
from specplan.profiler.latency import measure_latency


def engine_plain_ms(target: LoadedModel, curve: LatencyCurve, context: list[int], repeats: int) -> float:
    """ms of one plain token as llama.cpp decodes it at its own settings (0.0 off llama.cpp)."""
    if target.backend != "llama.cpp":
        return 0.0
    if not target.exact and 1 in curve.n:
        return curve.ms[curve.n.index(1)]  # the session already runs llama.cpp's own settings
    from specplan.runtime.build import target_session

    with target_session(replace(target, exact=False, wide_from=0), torch.device("cpu")) as session:
        return measure_latency(session, torch.device("cpu"), context, (1,), repeats).ms[0]
