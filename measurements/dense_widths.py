"""The target's T(n) at every width n = 1..64 on the plan's backend, against what the planner reads between
the profiled widths (planner/latency.py: the next profiled width's on a GGUF model, ``padded``; linear
interpolation, ``interpolate``, before): whether the widths the profile skips cost what the planner assumes.

Each width is timed as the profiler times it (profiler/latency.py): one untimed decode of the same width
(llama.cpp reuses its graph per shape), then the timed one, over a cache of CONTEXT tokens, the new tokens
removed after each; the median of PASSES passes over all widths after a warm-up pass.

    [THREADS=2] .venv/bin/python measurements/dense_widths.py PLAN [CONTEXT] [PASSES]

Prints one row per width: measured ms, the planner's reading, linear interpolation's, and ``*`` at the
profiled widths. Run it on a quiet machine (nothing else timed or tested beside it).
"""

from __future__ import annotations

import os
import statistics
import sys

from specplan.api import Runner
from specplan.core.quiet import quiet_libraries
from specplan.planner.latency import interpolate, latency_table, nearest_curve
from specplan.runtime.timing import time_ms

WIDEST = 64


def main() -> None:
    quiet_libraries(verbose=False)
    plan_path = sys.argv[1]
    context_length = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    passes = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    runner = Runner.open(plan_path, threads=int(os.environ.get("THREADS", "2"))).plan_runner
    session, device = runner.plain.target, runner.device
    vocab = session.vocab_size
    context = [(7 * index + 11) % vocab for index in range(context_length)]  # any tokens: cost does not depend on them
    filler = [(13 * index + 5) % vocab for index in range(WIDEST)]
    session.reset()
    session.extend(context)

    def timed(width: int) -> float:
        elapsed = time_ms(lambda: session.extend(filler[:width]), device)
        session.rewind_to(context + [0])  # keep exactly the context cached
        return elapsed

    samples: dict[int, list[float]] = {width: [] for width in range(1, WIDEST + 1)}
    for attempt in range(passes + 1):  # the first pass warms up
        for width in samples:
            timed(width)  # the same width untimed first: llama.cpp reuses its graph per shape
            elapsed = timed(width)
            if attempt:
                samples[width].append(elapsed)
    curve = nearest_curve(runner.profile.target, context_length)
    planner = latency_table(runner.profile.target, context_length, WIDEST)
    print(f"{'n':>3} {'measured':>9} {'planner':>8} {'linear':>7}   (ms; * profiled width; profile's curve at context {curve.context})")
    for width, times in samples.items():
        mark = "*" if width in curve.n else " "
        print(f"{width:3d} {statistics.median(times):9.1f} {planner(width):8.1f} {interpolate(curve, width).ms:7.1f} {mark}")


if __name__ == "__main__":
    main()
