"""T(n) against the number of cached tokens, on llama.cpp: what the profile's latency context changes.

llama.cpp attends over the cache's used cells padded to a multiple of 256, so a decode over 256 cached
tokens (257 cells: a span of 512) can cost more than one over 240 (a span of 256). The profile times
T(n) over the medians of three equal shares of the calibration answers' decode positions and averages
them (profiler/run.py ``decode_contexts``, docs/planner-math.md section 7.1); this prints
the median ms of one chain extend of each width over caches of each length, on one session of the
runtime (fast numerics), the lengths taken in turn within every pass (a drift of the shared machine's
pace biases none of them). Each timed extend comes right after an untimed one of the same width, as
the profiler times them.

``--workloads`` then prices every decode position of each workload's ``--quick`` calibration prompts and
40 evaluation prompts (prompt plus a 128-token answer) on the measured T(1), linear between the measured
caches of one attention span and level beyond them, and prints the mean over all positions beside what
each choice of caches estimates it as: the thirds' medians (now), the two quartiles (before), one median
position, a fixed 256.

    .venv/bin/python measurements/context_span.py [--model default|NAME|FILE.gguf] [--contexts 64,128,...]
        [--widths 1,8,16,64] [--repeats 8] [--threads 2] [--workloads spec-bench,humaneval,humaneval-edit]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy

from specplan.models.load import default_gguf_path, gguf_file
from specplan.runtime.llama_cpp_session import LlamaCppSession


def integers(text: str) -> list[int]:
    return [int(value) for value in text.split(",")]


SPAN = 256  # llama.cpp pads the attended cells to a multiple of this


def span_of(cells: int) -> int:
    return -(-cells // SPAN) * SPAN


def priced(position: int, one_token_ms: dict[int, float]) -> float:
    """T(1) at ``position`` cached tokens: linear between the measured caches whose decode spans the same
    cells as it, the nearest measured span's level where none does."""
    span = span_of(position + 1)
    same = sorted(context for context in one_token_ms if span_of(context + 1) == span)
    if not same:
        nearest = min(one_token_ms, key=lambda context: abs(span_of(context + 1) - span))
        return one_token_ms[nearest]
    return float(numpy.interp(position, same, [one_token_ms[context] for context in same]))


def estimates(lengths: list[int], one_token_ms: dict[int, float]) -> dict[str, float]:
    """The mean T(1) over the positions prompts of ``lengths`` decode a 128-token answer at, and what each
    choice of latency caches estimates it as (the profiler's own, ``decode_contexts``, first)."""
    from specplan.profiler.run import ANSWER_TOKENS, decode_contexts

    ordered = sorted(position for length in lengths for position in range(length, length + ANSWER_TOKENS))
    quantile = lambda share: ordered[min(len(ordered) - 1, int(len(ordered) * share))]  # noqa: E731
    choices = {"thirds": list(decode_contexts(lengths, ANSWER_TOKENS)),
               "quartiles": [quantile(0.25), quantile(0.75)], "median": [quantile(0.5)], "256": [256]}
    found = {"mean": statistics.fmean(priced(position, one_token_ms) for position in ordered)}
    for name, caches in choices.items():
        found[name] = statistics.fmean(priced(cache, one_token_ms) for cache in caches)
    return found


def print_estimates(path: Path, workloads: list[str], one_token_ms: dict[int, float]) -> None:
    from specplan.core.prompts import QUICK_PROMPTS, stratified
    from specplan.core.workloads import workload_split
    from specplan.models.chat import encode_prompt
    from specplan.models.load import load_model

    tokenizer = load_model(str(path)).tokenizer
    print("\nmean T(1) over every decode position, and each choice of caches' estimate of it (ms; ratio to the mean)")
    print("| workload | prompts | mean | thirds (now) | quartiles | one median | 256 |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for workload in workloads:
        for split, count in (("calibration", QUICK_PROMPTS), ("evaluation", 40)):
            prompts = stratified(workload_split(workload, split), count)
            found = estimates([len(encode_prompt(tokenizer, prompt.text)) for prompt in prompts], one_token_ms)
            cells = " | ".join(f"{found[name]:.2f} ({found[name] / found['mean']:.3f})" for name in ("thirds", "quartiles", "median", "256"))
            print(f"| {workload} | {split}, {count} | {found['mean']:.2f} | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="default (SmolLM2), a fetched model's name, or a .gguf path")
    parser.add_argument("--contexts", type=integers, default=integers("64,128,192,240,256,300,384,511,513,640,767,769,1000"))
    parser.add_argument("--widths", type=integers, default=integers("1,8,16,64"))
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workloads", type=lambda text: text.split(","), default=[],
                        help="price these workloads' decode positions on the measured T(1) (needs width 1)")
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
    if args.workloads and 1 in args.widths:
        print_estimates(Path(path), args.workloads, {context: statistics.median(samples[(context, 1)]) for context in args.contexts})


if __name__ == "__main__":
    main()
