"""T(n) against the number of cached tokens, on llama.cpp: what the profile's latency context changes.

llama.cpp attends over the cache's used cells padded to a multiple of 256, so a decode over 256 cached
tokens (257 cells: a span of 512) can cost more than one over 240 (a span of 256). The profile times
T(n) over two caches and averages them (profiler/run.py ``decode_contexts``, docs/planner-math.md
section 7.1); this prints
the median ms of one chain extend of each width over caches of each length, on one session of the
runtime (fast numerics), the lengths taken in turn within every pass (a drift of the shared machine's
pace biases none of them). Each timed extend comes right after an untimed one of the same width, as
the profiler times them.

    .venv/bin/python measurements/context_span.py [--model default|NAME|FILE.gguf] [--contexts 64,128,192,240,256,300,384,511,513]
        [--widths 1,8,16,64] [--repeats 8] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from specplan.models.load import default_gguf_path, gguf_file
from specplan.runtime.llama_cpp_session import LlamaCppSession


def integers(text: str) -> list[int]:
    return [int(value) for value in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="default (SmolLM2), a fetched model's name, or a .gguf path")
    parser.add_argument("--contexts", type=integers, default=integers("64,128,192,240,256,300,384,511,513"))
    parser.add_argument("--widths", type=integers, default=integers("1,8,16,64"))
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    path = default_gguf_path() if args.model == "default" else (gguf_file(args.model) or args.model)
    session = LlamaCppSession(path, n_ctx=max(args.contexts) + max(args.widths) + 8, threads=args.threads, exact=False)
    samples = {(context, width): [] for context in args.contexts for width in args.widths}
    try:
        for attempt in range(args.repeats + 1):  # the first pass warms up
            for context in args.contexts:
                session.reset()
                session.extend([(7 * index + 11) % 30000 for index in range(context)])
                for width in args.widths:
                    for _ in range(2):  # untimed, then timed
                        started = time.perf_counter()
                        session.extend([(13 * index + 5) % 30000 for index in range(width)])
                        elapsed = (time.perf_counter() - started) * 1e3
                        session.trim(context)
                    if attempt:
                        samples[(context, width)].append(elapsed)
    finally:
        session.close()
    print(f"{Path(path).name}: median ms of one extend, {args.repeats} passes, "
          f"{args.threads} threads")
    print("| cached tokens | " + " | ".join(f"T({width})" for width in args.widths) + " |")
    print("|---:|" + "---:|" * len(args.widths))
    for context in args.contexts:
        cells = " | ".join(f"{statistics.median(samples[(context, width)]):.2f}" for width in args.widths)
        print(f"| {context} | {cells} |")


if __name__ == "__main__":
    main()
