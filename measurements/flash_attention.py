"""One llama.cpp decode with and without flash attention: median ms of a decode of each width over a
cache of each length, the target session as the profile builds it under fast numerics (every thread,
repacking as on this CPU), flash attention as llama.cpp chooses (on) against off.

    .venv/bin/python measurements/flash_attention.py --model default --past 300,1500
    .venv/bin/python measurements/flash_attention.py --model qwen2.5-coder-1.5b --past 300
"""

from __future__ import annotations

import argparse
import statistics
import time

from specplan.models.load import gguf_file
from specplan.runtime.llama_cpp_session import LlamaCppSession

TEXT = "def double(x):\n    return x * 2\n" * 400


def decode_ms(session: LlamaCppSession, text: list[int], past: int, width: int, repeats: int) -> float:
    """Median ms of one decode of ``width`` tokens after ``past`` cached ones (one untimed first)."""
    times = []
    for repeat in range(repeats + 1):
        session.trim(past)
        start = time.perf_counter()
        session.extend_best_tokens(text[past:past + width])
        if repeat:
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--past", default="300,1500")
    parser.add_argument("--widths", default="1,4,16,64")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    path = gguf_file(args.model)
    print("| flash attention | cached | " + " | ".join(f"T({w}) ms" for w in args.widths.split(",")) + " |")
    for flash_off in (False, True):
        with LlamaCppSession(path, n_ctx=4096, threads=args.threads, exact=False, flash_off=flash_off) as session:
            text = session.tokenize(TEXT)
            for past in (int(p) for p in args.past.split(",")):
                session.reset()
                session.advance(text[:past])
                row = [decode_ms(session, text, past, int(w), args.repeats) for w in args.widths.split(",")]
                label = "off" if flash_off else "llama.cpp's (on)"
                print(f"| {label} | {past} | " + " | ".join(f"{ms:.1f}" for ms in row) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
