"""The floor a plan is held against on llama.cpp: llama.cpp's own plain decoding on this machine.

A user who does not run specplan runs llama.cpp (llama-server, llama-cpp-python) with its own
settings: one-token decodes on every thread, weights repacked, flash attention as llama.cpp
chooses. That is the target session's ``fast`` numerics, so under fast numerics the floor is the
profile's own T(1); under ``exact`` numerics (one-token decodes on one thread), or with flash
attention turned off, it is timed on a second session at llama.cpp's settings over the same cached
context. The planner keeps speculation only where it beats this floor (docs/planner-math.md
section 9.1).

Flash attention is llama.cpp's choice (on, on a CPU) unless ``profile --flash-attention off``, or
``measure`` and the target's one-token decodes take at most FLASH_OFF_GAIN of that time without
it: :func:`flash_attention_off` times both over the profile's context. Not the default: without it
verify rows part further from one-token rows (docs/backends.md, "Flash attention"). On a 2-core Intel Xeon with AMX (2026-11-29) SmolLM2's one-token decode over
300 cached tokens took 15.8 ms without flash attention and 29.7 ms with it, over 1,500 tokens 20.4
against 54.1; the 1.5B's 78 against 85 (``measurements/flash_attention.py``).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from specplan.core.backends import traits
from specplan.core.profile import LatencyCurve
from specplan.models.load import LoadedModel
from specplan.profiler.latency import measure_latency


FLASH_OFF_GAIN = 0.9  # flash attention goes off only where that makes a plain token at least 10% cheaper


def flash_attention_off(target: LoadedModel, context: list[int], repeats: int) -> tuple[bool, float, float]:
    """(off?, ms of one plain token with llama.cpp's flash attention, ms without) over a cache holding
    ``context``; off only for a llama.cpp target with fast numerics (exact needs it on) that decodes
    at most FLASH_OFF_GAIN of the time without it."""
    if not traits(target.backend).kernel_settings or target.exact:
        return False, 0.0, 0.0
    from specplan.runtime.build import target_session

    ms = []
    for flash_off in (False, True):
        with target_session(replace(target, wide_from=0, flash_off=flash_off), torch.device("cpu")) as session:
            ms.append(measure_latency(session, torch.device("cpu"), context, (1,), repeats).ms[0])
    return ms[1] <= FLASH_OFF_GAIN * ms[0], ms[0], ms[1]


def engine_plain_ms(target: LoadedModel, curve: LatencyCurve, context: list[int], repeats: int) -> float:
    """ms of one plain token as llama.cpp decodes it at its own settings (0.0 off llama.cpp: a backend
    whose own plain decoding is not the floor, core/backends.py ``engine_floor``)."""
    if not traits(target.backend).engine_floor:
        return 0.0
    if not target.exact and not target.flash_off and 1 in curve.n:
        return curve.ms[curve.n.index(1)]  # the session already runs llama.cpp's own settings
    from specplan.runtime.build import target_session

    with target_session(replace(target, exact=False, wide_from=0, flash_off=False), torch.device("cpu")) as session:
        return measure_latency(session, torch.device("cpu"), context, (1,), repeats).ms[0]
