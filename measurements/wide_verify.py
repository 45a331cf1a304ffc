"""T(n) of a llama.cpp target on repacked weights against the same GGUF as the file holds them.

llama.cpp's fast numerics repack quantized weights for its few-token kernels; a session with
``wide_from`` verifies wide chains on a second, unrepacked copy (docs/backends.md, "Wide
verifies on unrepacked weights"). This times one decode of n tokens (a logits row each) over a
warm cache of ``--context`` tokens on both copies, interleaved, as the profiler does
(profiler/wide_verify.py ``measure_routes``); medians. Then the ms of copying the cache's
sequence 0 between the two contexts, and the width from which the profiler would take the
unrepacked copy (profiler/wide_verify.py ``route``, without the copies' cost added); last, the ms
of a one-token decode with and without the second copy loaded. Run:

    .venv/bin/python measurements/wide_verify.py [--model qwen2.5-coder-1.5b] [--context 256]
        [--threads 2] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from specplan.models.load import gguf_file
from specplan.profiler.latency import LLAMA_CPP_WIDTHS
from specplan.profiler.wide_verify import measure_routes, route
from specplan.runtime.llama_cpp_session import LlamaCppSession


def one_token_ms(path, context: list[int], threads: int, repeats: int) -> dict[str, float]:
    """Median ms of a one-token decode in a session without and with the second copy loaded
    (``wide_from=32``), each run of 48 decodes right after a 64-token verify and a fresh prefill
    (on the second copy where it is loaded, as a plan's rounds leave it), interleaved."""
    sessions = {"one copy": LlamaCppSession(path, n_ctx=1024, threads=threads, exact=False),
                "two copies": LlamaCppSession(path, n_ctx=1024, threads=threads, exact=False, wide_from=32)}
    samples: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(repeats):
        for name, session in sessions.items():
            session.reset()
            session.extend(context)
            session.extend(context[:64])
            session.reset()
            session.extend(context)
            token, started = context[-1], time.perf_counter()
            for _ in range(48):
                token = session.extend_best_tokens([token])[0]
            samples[name].append((time.perf_counter() - started) * 1e3 / 48)
    for session in sessions.values():
        session.close()
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    context = [(7 * index + 11) % 30000 + 1000 for index in range(args.context)]
    with LlamaCppSession(gguf_file(args.model), n_ctx=1024, threads=args.threads, exact=False, wide_from=1) as session:
        curves = measure_routes(session, context, LLAMA_CPP_WIDTHS, args.repeats)
        copy_ms = session.copy_ms(args.repeats)
    print(f"{args.model}, {args.context} cached tokens, {args.threads} threads, medians of {args.repeats}")
    print("| n | " + " | ".join(str(width) for width in LLAMA_CPP_WIDTHS) + " |")
    print("|---|" + "---:|" * len(LLAMA_CPP_WIDTHS))
    for name, curve in zip(("repacked", "as the file holds them"), curves):
        print(f"| {name}, ms | " + " | ".join(f"{ms:.1f}" for ms in curve.ms) + " |")
    _, wide_from = route(curves[0], curves[1])
    print(f"one copy of sequence 0 between the contexts: {copy_ms:.2f} ms; "
          f"unrepacked from width {wide_from or 'never'} (copies not added)")
    plain = one_token_ms(gguf_file(args.model), context, args.threads, args.repeats)
    print("one-token decode after a 64-token verify, ms: " + ", ".join(f"{name} {ms:.2f}" for name, ms in plain.items()))


if __name__ == "__main__":
    main()
