"""T_m(n): the profiled forward time of model m over n new tokens, interpolated.

A :class:`~specplan.core.profile.LatencyCurve` holds ms at a few widths n (1, 2, 4, ..., 64)
over a warm KV cache of ``context`` tokens (docs/planner-math.md, Vocabulary). Between profiled
widths T is piecewise linear. Beyond the largest profiled width it is extrapolated linearly
from the last two points, and the result says so (``extrapolated``); more than twice the
largest profiled width is refused (``inf``), so the solver never chooses a shape whose cost
was not measured nearly. A model profiled with the compiled runtime pays for the bucket its
forward is padded to, and a GGUF model (run by llama.cpp) pays at least for the next profiled width,
its kernels computing the new tokens in tiles of rows: for both, T is a step function over the
profiled widths (:func:`padded`, docs/planner-math.md section 7.1).

References
----------
Sequoia, arXiv 2402.12374 (hardware-aware tree size from measured T(n)).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace

from specplan.core.profile import LatencyCurve, ModelEntry

REFUSE_FACTOR = 2  # n > REFUSE_FACTOR * largest profiled n  ->  inf
GGUF = "gguf"  # the dtype a profile records for a GGUF file's model (models/load.py): llama.cpp runs it


@dataclass(frozen=True)
class LatencyPoint:
    """One interpolated time: ``ms`` (inf when refused) and whether it was extrapolated."""

    ms: float
    extrapolated: bool = False


def interpolate(curve: LatencyCurve, n: int) -> LatencyPoint:
    """T(n) from a latency curve.

    Parameters
    ----------
    curve : LatencyCurve
        Profiled ``n`` (strictly increasing) and ``ms`` of equal length.
    n : int
        Number of new tokens in the forward, >= 1.

    Returns
    -------
    LatencyPoint
        Piecewise-linear ms between profiled widths; below the smallest profiled width the
        first ms (flagged extrapolated); above the largest, the line through the last two
        points, never decreasing (flagged); above ``2 * max(curve.n)``, ``inf`` (flagged).

    Examples
    --------
    >>> curve = LatencyCurve(context=256, n=(1, 2, 4), ms=(10.0, 11.0, 13.0))
    >>> interpolate(curve, 3)
    LatencyPoint(ms=12.0, extrapolated=False)
    >>> interpolate(curve, 6)
    LatencyPoint(ms=15.0, extrapolated=True)
    >>> interpolate(curve, 9).ms
    inf
    """
    if n < 1:
        raise ValueError(f"a forward needs n >= 1 new tokens, got {n}")
    widths, times = curve.n, curve.ms
    if n > REFUSE_FACTOR * widths[-1]:
        return LatencyPoint(math.inf, True)
    index = bisect.bisect_left(widths, n)
    if index < len(widths) and widths[index] == n:
        return LatencyPoint(float(times[index]))
    if index == 0:
        return LatencyPoint(float(times[0]), True)
    if index == len(widths):
        if len(widths) == 1:
            return LatencyPoint(float(times[-1]), True)
        slope = max(0.0, (times[-1] - times[-2]) / (widths[-1] - widths[-2]))
        return LatencyPoint(float(times[-1] + slope * (n - widths[-1])), True)
    low, high = widths[index - 1], widths[index]
    share = (n - low) / (high - low)
    return LatencyPoint(float(times[index - 1] + share * (times[index] - times[index - 1])))


def nearest_curve(model: ModelEntry, context: int | None, batch: int | None = None) -> LatencyCurve | None:
    """The model's curve whose ``context`` is nearest ``context`` (the first curve if None),
    among its curves at ``batch`` sequences (None: its smallest batch, 1 in a measured profile;
    a batch view, :mod:`.batch`, holds one batch size only).

    Returns None when the model has no latency curve at that batch (the solver then skips it).
    """
    if not model.latency:
        return None
    batch = min(curve.batch for curve in model.latency) if batch is None else batch
    curves = [curve for curve in model.latency if curve.batch == batch]
    if not curves:
        return None
    if context is None:
        return curves[0]
    return min(curves, key=lambda curve: (abs(curve.context - context), curve.context))


@dataclass(frozen=True)
class LatencyTable:
    """T(n) for n = 0..len(ms)-1 of one model at one context, precomputed for the solvers.

    ``ms[0]`` is unused (nan). ``extrapolated_from``: the smallest n above the profiled
    range (n >= it is extrapolated or, beyond twice the range, inf).
    """

    model: str
    context: int
    ms: tuple[float, ...]  # [max_n + 1]
    extrapolated_from: int

    def __call__(self, n: int) -> float:
        return self.ms[n] if n < len(self.ms) else math.inf

    def is_extrapolated(self, n: int) -> bool:
        return n >= self.extrapolated_from


def padded(curve: LatencyCurve, n: int) -> LatencyPoint:
    """T(n) of a runtime that pads a forward to the next profiled width (its compiled graphs'
    buckets, ``runtime/compile/compiled.py``; vLLM and TensorRT-LLM pad to captured batch sizes the same
    way): a step function inside the profiled range, :func:`interpolate` beyond it (eager there).

    >>> curve = LatencyCurve(context=256, n=(1, 2, 4, 8), ms=(10.0, 11.0, 13.0, 16.0))
    >>> padded(curve, 5)
    LatencyPoint(ms=16.0, extrapolated=False)
    """
    index = bisect.bisect_left(curve.n, n)
    if n < 1 or index == len(curve.n):
        return interpolate(curve, n)
    return LatencyPoint(float(curve.ms[index]))


def pads_to_buckets(model: ModelEntry) -> bool:
    """Whether the model's T between profiled widths is the next profiled width's (:func:`padded`): its
    forwards run as compiled, width-bucketed graphs (a draft head is always eager, whatever runtime
    profiled it), or it is a GGUF file, run by llama.cpp, whose quantized matrix kernels compute the new
    tokens in tiles of rows. There a width between profiled ones costs at least the next one's: the
    1.5B Q4_K_M on the home EPYC (``measurements/dense_widths.py``) took 183 ms for 15 tokens and 156 for
    16, 293 for 33 and 226 for 32 (docs/planner-math.md section 7.1), where linear interpolation read
    155 and 242. The solver then drafts shapes whose verify width was profiled.

    >>> pads_to_buckets(ModelEntry("target", "qwen", "", dtype="gguf")), pads_to_buckets(ModelEntry("t", "gpt2", ""))
    (True, False)
    """
    compiled = model.mode == "compiled" and not model.source.startswith("head:")
    return compiled or model.dtype == GGUF


def linear_widths(model: ModelEntry) -> ModelEntry:
    """``model`` with each batch-1 curve densified to every width up to its largest, read linearly between
    the profiled ones (:func:`interpolate`): how T was read before a GGUF model's widths were read as steps
    (:func:`pads_to_buckets`), for re-checking plans solved then (planner/recheck.py).

    >>> entry = ModelEntry("target", "qwen", "", dtype="gguf", latency=(LatencyCurve(256, (1, 4), (10.0, 16.0)),))
    >>> latency_table(entry, None, 3).ms[1:], latency_table(linear_widths(entry), None, 3).ms[1:]
    ((10.0, 16.0, 16.0), (10.0, 12.0, 14.0))
    """
    if model.dtype != GGUF:
        return model
    curves = tuple(replace(curve, n=tuple(range(1, curve.n[-1] + 1)),
                           ms=tuple(interpolate(curve, n).ms for n in range(1, curve.n[-1] + 1)))
                   if curve.batch == 1 else curve for curve in model.latency)
    return replace(model, latency=curves)


def latency_table(model: ModelEntry, context: int | None, max_n: int) -> LatencyTable | None:
    """Precompute T(1..max_n) for a model from its nearest curve; None without a curve.

    A compiled or GGUF model's T is a step function (:func:`padded`): a 5-node tree costs a forward of 8.
    """
    curve = nearest_curve(model, context)
    if curve is None:
        return None
    point = padded if pads_to_buckets(model) else interpolate
    ms = (math.nan,) + tuple(point(curve, n).ms for n in range(1, max_n + 1))
    return LatencyTable(model.id, curve.context, ms, curve.n[-1] + 1)
