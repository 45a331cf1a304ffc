"""Which verify widths the llama.cpp target runs on unrepacked weights (docs/backends.md, "Wide
verifies on unrepacked weights").

With llama.cpp's fast numerics the target's weights are repacked for its few-token kernels, and
a second copy loaded as the file holds them decodes wide chains faster on some CPUs
(runtime/llama_cpp_wide.py). The profiler times the target's T(n) on both copies in one session
over the same cache, interleaved (each pass times every width on both, so a drift in the shared
machine's pace biases neither); the wide curve adds two copies of the cache's sequence 0 between
the contexts (a wide round after plain rounds pays one, the next plain round the other). The
target then verifies on the unrepacked copy from the narrowest measured width at which that is
faster by ``MARGIN`` at every measured width from it on (:func:`route`): a second copy of the
weights costs memory, and timing noise alone should not buy one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

from specplan.core.profile import LatencyCurve
from specplan.profiler.latency import _filler

MARGIN = 0.03  # the wide path must save at least this share of T(n) at every width it takes
WIDE_CURVE = "target:wide"  # the key of the wide curve among the profiler's (checkpointed) curves
NEVER = 1 << 30  # a wide_from no extend reaches: the profiler's target session loads both copies and
# runs on the repacked one but while measure_both times the other


def measure_both(session, context: Sequence[int], widths: Sequence[int], repeats: int,
                 progress: Callable[[], None] | None = None) -> tuple[LatencyCurve, LatencyCurve]:
    """(T(n) on the repacked weights, T(n) on the unrepacked copy plus two copies of sequence 0)
    of the target's ``session`` (which holds both: ``wide_from`` > 0, restored after) over
    ``context`` cached tokens: :func:`measure_routes`."""
    chosen = session.wide_from
    try:
        repacked, unrepacked = measure_routes(session, context, widths, repeats, progress)
        copy_ms = session.copy_ms(repeats)
    finally:
        session.wide_from = chosen
    return repacked, LatencyCurve(unrepacked.context, unrepacked.n,
                                  tuple(round(ms + 2 * copy_ms, 4) for ms in unrepacked.ms), unrepacked.source)


def measure_routes(session, context: Sequence[int], widths: Sequence[int], repeats: int,
                   progress: Callable[[], None] | None = None) -> tuple[LatencyCurve, LatencyCurve]:
    """Median ms of a chain extend of each width on ``session``'s own (repacked) context and on its
    wide one (``session.wide_from`` switched between extends), over a cache holding ``context``.
    A warm-up pass, then ``repeats`` passes that each time every width on both; each timed
    extend comes right after an untimed one of the same width and route (llama.cpp reuses its
    graph, as consecutive rounds do: profiler/latency.py ``measure_latency``)."""
    context = list(context)
    session.reset()
    session.extend(context)
    filler = _filler(context, widths)
    samples = {(route, width): [] for route in (NEVER, 1) for width in widths}
    for attempt in range(repeats + 1):
        for width in widths:
            for route in (NEVER, 1):
                session.wide_from = route
                for _ in range(2):  # untimed, then timed: the second time is kept
                    started = time.perf_counter()
                    session.extend(filler[:width])
                    elapsed = (time.perf_counter() - started) * 1e3
                    session.trim(len(context))
                if attempt:
                    samples[(route, width)].append(elapsed)
            if attempt == repeats and progress is not None:
                progress()
    curves = tuple(LatencyCurve(len(context), tuple(widths),
                                tuple(round(statistics.median(samples[(route, width)]), 4) for width in widths))
                   for route in (NEVER, 1))
    return curves


def route(curve: LatencyCurve, wide: LatencyCurve | None) -> tuple[LatencyCurve, int]:
    """(the target's T(n) as its session runs it, ``wide_from``): from the narrowest width at which
    ``wide`` is faster than ``curve`` by ``MARGIN`` and stays so at every wider measured width, T(n) is the
    wide one; ``wide_from`` 0 (and ``curve`` unchanged) when there is no such width."""
    if wide is None or wide.n != curve.n:
        return curve, 0
    start = len(curve.n)
    while start > 0 and wide.ms[start - 1] < (1 - MARGIN) * curve.ms[start - 1]:
        start -= 1
    if start == len(curve.n):
        return curve, 0
    ms = curve.ms[:start] + wide.ms[start:]
    return LatencyCurve(curve.context, curve.n, ms, curve.source, curve.batch), curve.n[start]
