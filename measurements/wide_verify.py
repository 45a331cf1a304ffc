"""T(n) of a llama.cpp target on repacked weights against the same GGUF as the file holds them.

llama.cpp's fast numerics repack quantized weights for its few-token kernels; a session with
``wide_from`` verifies wide chains on a second, unrepacked copy (docs/backends.md, "Wide
verifies on unrepacked weights"). This times one decode of n tokens (a logits row each) over a
warm cache of ``--context`` tokens on both copies, interleaved, as the profiler does
(profiler/wide_verify.py ``measure_routes``); medians. Then the ms of copying the cache's
sequence 0 between the two contexts, and the width from which the profiler would take the
unrepacked copy (profiler/wide_verify.py ``route``, without the copies' cost added). Run:

    .venv/bin/python measurements/wide_verify.py [--model qwen2.5-coder-1.5b] [--context 256]
        [--threads 2] [--repeats 5]
"""

from __future__ import annotations

import argparse

from specplan.models.load import gguf_file
from specplan.profiler.latency import LLAMA_CPP_WIDTHS
from specplan.profiler.wide_verify import measure_routes, route
from specplan.runtime.llama_cpp_session import LlamaCppSession


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


if __name__ == "__main__":
    main()
