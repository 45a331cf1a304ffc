"""What decoding sequences together adds to each target forward beyond T(n, b) (docs/planner-math.md
section 11.4).

``T(n, b)`` (:mod:`.batch_latency`) times bare forwards of equal-length rows over a cache without
holes. Sequences decoded together on torch (runtime/torch_shared.py: an engine per sequence, their
forwards batched) also pad short draft rows, pass a padding mask (so attention takes its masked
path), leave rejected slots as holes that later forwards attend over until the cache is packed, and
verify, roll back and draft each sequence on the host between forwards, each on its own thread. The
profiler measures that overhead where it arises: ``b`` calibration prompts, each cut to the curve's
context, decoded together by the runtime itself, plainly and by ``ngram:3`` sequence stages at a few
draft lengths; per run, over the forwards after the prompts' first,

    overhead = mean time from one forward's end to the next one's - mean T(width of the forward, b)

at the run's mean width (the widest row: root + longest draft). The planner adds it to the target's
T(n, b), interpolated in ``n`` (:func:`specplan.planner.batch.batch_view`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specplan.core.profile import LatencyCurve
from specplan.planner.latency import interpolate
from specplan.runtime.batcher import generate_together
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.torch_shared import SharedNetworks

GAMMAS = (0, 1, 2, 4)  # plain decoding, then n-gram sequence stages of these draft lengths
NEW_TOKENS = 24  # per sequence and run


def repeated_to(ids: Sequence[int], length: int) -> list[int]:
    """``ids`` repeated until at least ``length`` long, cut to ``length`` (the latency context's rule).

    >>> repeated_to([1, 2, 3], 7)
    [1, 2, 3, 1, 2, 3, 1]
    """
    ids = list(ids)
    while ids and len(ids) < length:
        ids = ids + ids
    return ids[:length]


def batch_prompts(context_ids: Sequence[int], prompts: Sequence[Sequence[int]], batch: int) -> list[list[int]]:
    """``batch`` prompts of exactly ``len(context_ids)`` tokens: each calibration prompt (cycled)
    after as much of the shared context as fills it, so that the rows differ where they decode.

    >>> batch_prompts([9, 9, 9], [[1], [2, 3]], 3)
    [[9, 9, 1], [9, 2, 3], [9, 9, 1]]
    """
    size = len(context_ids)
    return [(list(context_ids) + list(prompts[index % len(prompts)]))[-size:] for index in range(batch)]


def _overhead_point(model: torch.nn.Module, device: torch.device, rows: list[list[int]], gamma: int,
                    curve: LatencyCurve) -> tuple[float, float] | None:
    """(mean width, ms of overhead per target forward) of one run of ``len(rows)`` sequences decoded together,
    plainly (``gamma`` 0) or by ``ngram:3`` chains of ``gamma``, over the forwards after the first that cover every
    sequence (one that ended early leaves the others' later forwards narrower); None without one."""
    networks = SharedNetworks(len(rows))
    shared = networks.shared(model)
    engines = [SpeculativeEngine(networks.session(model), device, set(), NgramDrafter(3) if gamma else None,
                                 gamma=gamma, fixed_chain=True) for _ in rows]
    shared.log = []
    generate_together(networks.batcher, engines, rows, NEW_TOKENS, [SamplingConfig()] * len(rows))
    # each forward after the first over every sequence: its period since the one before, and its width
    forwards = [(end - shared.log[number][0], width) for number, (end, width, covered) in enumerate(shared.log[1:])
                if covered == len(rows)]
    if not forwards:
        return None
    period = sum(seconds for seconds, _ in forwards) / len(forwards)
    bare = sum(interpolate(curve, width).ms for _, width in forwards) / len(forwards)
    return sum(width for _, width in forwards) / len(forwards), 1000.0 * period - bare


def measure_batch_overhead(model: torch.nn.Module, device: torch.device, context_ids: Sequence[int],
                           prompts: Sequence[Sequence[int]], curve: LatencyCurve,
                           gammas: Sequence[int] = GAMMAS) -> LatencyCurve:
    """The overhead curve at ``curve.batch``: ms (>= 0) per target forward against mean width.

    Runs that reach the same rounded width are averaged; EOS is not a stop (every run decodes
    its full budget).
    """
    rows = batch_prompts(context_ids, prompts, curve.batch)
    _overhead_point(model, device, rows, 0, curve)  # warm-up: this batch's first shapes
    points: dict[int, list[float]] = {}
    for gamma in gammas:
        point = _overhead_point(model, device, rows, gamma, curve)
        if point is not None:
            points.setdefault(max(1, round(point[0])), []).append(point[1])
    widths = tuple(sorted(points))
    ms = tuple(round(max(0.0, sum(points[n]) / len(points[n])), 4) for n in widths)
    return LatencyCurve(curve.context, widths, ms, "measured", curve.batch)
