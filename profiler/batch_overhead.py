"""What the batched runtime adds to each target forward beyond T(n, b) (docs/planner-math.md
section 11.4).

``T(n, b)`` (:mod:`.batch_latency`) times bare forwards of equal-length rows over a cache without
holes. The batched runtime (:mod:`specplan.runtime.batched`) also pads short draft rows, passes
a padding mask (so attention takes its masked path), leaves rejected slots as holes that later
forwards attend over until the cache is packed, and verifies and rolls back each sequence on the
host. The profiler measures that overhead where it arises: ``b`` calibration prompts, each cut
to the curve's context, decoded by the runtime itself, plainly and as an ``ngram:3`` sequence
stage at a few draft lengths; per run

    overhead = verify seconds / rounds - mean over rounds of T(width of the round, b)

at the run's mean width (root + longest draft). The planner adds it to the target's T(n, b),
interpolated in ``n`` (:func:`specplan.planner.batch.batch_view`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specplan.core.profile import LatencyCurve
from specplan.planner.latency import interpolate
from specplan.runtime.batched import BatchedEngine
from specplan.runtime.batched.drafters import PerSequenceDrafters
from specplan.runtime.drafters.ngram import NgramDrafter

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


def _overhead_point(engine: BatchedEngine, rows: list[list[int]], curve: LatencyCurve) -> tuple[float, float] | None:
    """(mean width, ms of overhead per verify forward) of one run, or None without a round."""
    result = engine.generate(rows, NEW_TOKENS)
    if not result.rounds:
        return None
    bare = sum(interpolate(curve, width).ms for width in result.verify_widths) / result.rounds
    return sum(result.verify_widths) / result.rounds, 1000.0 * result.verify_seconds / result.rounds - bare


def measure_batch_overhead(model: torch.nn.Module, device: torch.device, context_ids: Sequence[int],
                           prompts: Sequence[Sequence[int]], curve: LatencyCurve, pad_id: int = 0,
                           gammas: Sequence[int] = GAMMAS) -> LatencyCurve:
    """The overhead curve at ``curve.batch``: ms (>= 0) per target forward against mean width.

    Runs that reach the same rounded width are averaged; EOS is not a stop (every run decodes
    its full budget).
    """
    rows = batch_prompts(context_ids, prompts, curve.batch)
    BatchedEngine(model, device, set(), None, 0, pad_id).generate(rows, 2)  # warm-up: this batch's first shapes
    points: dict[int, list[float]] = {}
    for gamma in gammas:
        drafter = PerSequenceDrafters(lambda: NgramDrafter(3)) if gamma else None
        engine = BatchedEngine(model, device, set(), drafter, gamma, pad_id)
        point = _overhead_point(engine, rows, curve)
        if point is not None:
            points.setdefault(max(1, round(point[0])), []).append(point[1])
    widths = tuple(sorted(points))
    ms = tuple(round(max(0.0, sum(points[n]) / len(points[n])), 4) for n in widths)
    return LatencyCurve(curve.context, widths, ms, "measured", curve.batch)
