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

``--method M``: also one line per category of M against the reference, with the ratio's 95%
interval over the category's prompts (resampled in pairs: bench/metrics.py ``spread_of_sums``).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
from pathlib import Path

import numpy as np

from specplan.bench.metrics import pooled_rate_ratio, spread_of_sums

RUNTIME_METHODS = ("plan", "plain-runtime")  # the main table's runtime methods (grid points have rows of their own)


def decode_step(row: dict, old: bool) -> tuple[float, float] | None:
    """(tokens, seconds) of a row's decode steps; None without a decode rate."""
    rate = row.get("decode_tokens_per_s")
    if not rate:
        return None
    tokens = row["new_tokens"] - (0 if row["method"] in RUNTIME_METHODS else 1)  # a peer's first is its prefill's
    return tokens, (row["new_tokens"] if old else tokens) / rate  # an old row's rate counted every token


def category_intervals(rows: list[dict], old: bool, method: str, reference: str) -> dict[str, tuple]:
    """Per category: (prompts, method / reference decode rate, its interval over the prompts)."""
    steps = {(row["method"], row["category"], row["prompt_id"]): decode_step(row, old) for row in rows}
    paired: dict[str, list] = collections.defaultdict(list)
    for (name, category, prompt), step in steps.items():
        other = steps.get((reference, category, prompt))
        if name == method and step and other:
            paired[category].append([*step, *other])
    result = {}
    for category, columns in sorted(paired.items()):
        ratio = float(pooled_rate_ratio(np.asarray(columns, dtype=float).sum(axis=0, keepdims=True))[0])
        result[category] = (len(columns), ratio, spread_of_sums(columns, pooled_rate_ratio))
    return result


def pooled(rows: list[dict], old: bool) -> tuple[dict, dict]:
    """(method -> [tokens, seconds], (method, category) -> [tokens, seconds]) of the decode steps."""
    overall: dict = collections.defaultdict(lambda: [0.0, 0.0])
    category: dict = collections.defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        step = decode_step(row, old)
        if step is None:
            continue
        tokens, seconds = step
        for key, table in ((row["method"], overall), ((row["method"], row["category"]), category)):
            table[key][0] += tokens
            table[key][1] += seconds
    return overall, category


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a bench report.json (or report.json.gz)")
    parser.add_argument("--reference", default="llama-server")
    parser.add_argument("--written-before-the-fix", action="store_true")
    parser.add_argument("--method", help="a method whose per-category ratios to print with their intervals")
    args = parser.parse_args()
    opened = gzip.open(args.report, "rt", encoding="utf-8") if args.report.suffix == ".gz" else args.report.open(encoding="utf-8")
    with opened as file:
        report = json.load(file)
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
    if args.method:
        print(f"\n| category | prompts | {args.method} / {args.reference} | 95% interval over the prompts |\n|---|---:|---:|---|")
        for name, (prompts, ratio, spread) in category_intervals(report["rows"], args.written_before_the_fix,
                                                                 args.method, args.reference).items():
            interval = f"{spread[0]:.3f}-{spread[1]:.3f}" if spread else "-"
            print(f"| {name} | {prompts} | {ratio:.3f}x | {interval} |")


if __name__ == "__main__":
    main()
