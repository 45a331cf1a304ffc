"""Decode rates of a stored bench report, every method counted as the bench counts it now.

A report written before decode rates left out a peer's first token (llama-server, llama.cpp's
``generate`` and transformers get it from their forward over the whole prompt; the runtime from
its first round: docs/formats.md, bench ``rows``) overstated every peer's decode rate by one token
per answer. This reads the report's rows and pools, per method, the tokens decode steps yielded
over the seconds after the prefill, overall and per category, against a reference method.

    .venv/bin/python measurements/decode_rates.py profiles/cpu-qwen-llamacpp-edit-long/bench-40x128/report.json \
        [--reference llama-server] [--written-before-the-fix]

``--written-before-the-fix``: the rows' peer rates still count the first token (reports written
before 2026-11-27 14:30 UTC); without it the rows are taken as they are.
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

RUNTIME_METHODS = ("plan", "plain-runtime")  # the main table's runtime methods (grid points have rows of their own)


def pooled(rows: list[dict], old: bool) -> tuple[dict, dict]:
    """(method -> [tokens, seconds], (method, category) -> [tokens, seconds]) of the decode steps."""
    overall: dict = collections.defaultdict(lambda: [0.0, 0.0])
    category: dict = collections.defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        rate = row.get("decode_tokens_per_s")
        if not rate:
            continue
        tokens = row["new_tokens"] - (0 if row["method"] in RUNTIME_METHODS else 1)  # a peer's first is its prefill's
        seconds = (row["new_tokens"] if old else tokens) / rate  # an old row's rate counted every token
        for key, table in ((row["method"], overall), ((row["method"], row["category"]), category)):
            table[key][0] += tokens
            table[key][1] += seconds
    return overall, category


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--reference", default="llama-server")
    parser.add_argument("--written-before-the-fix", action="store_true")
    args = parser.parse_args()
    report = json.loads(args.report.read_text(encoding="utf-8"))
    overall, category = pooled(report["rows"], args.written_before_the_fix)
    rate = {method: tokens / seconds for method, (tokens, seconds) in overall.items() if seconds > 0}
    categories = sorted({name for _, name in category})
    print(f"| method | decode tok/s | vs {args.reference} | per category |")
    print("|---|---:|---:|---|")
    for method, value in rate.items():
        if args.reference not in rate:
            print(f"| {method} | {value:.1f} | - | - |")
            continue
        ratios = [(category[method, name][0] / category[method, name][1])
                  / (category[args.reference, name][0] / category[args.reference, name][1])
                  for name in categories if (method, name) in category and (args.reference, name) in category]
        print(f"| {method} | {value:.1f} | {value / rate[args.reference]:.3f}x | {min(ratios):.2f}x-{max(ratios):.2f}x |")


if __name__ == "__main__":
    main()
