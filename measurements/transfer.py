"""The transfer matrix: plans calibrated on one workload, each evaluated on every workload.

For each evaluation workload, one interleaved ``specplan bench`` run of every plan (the first as
``plan``, the others through ``--also NAME=PLAN`` as ``plan:NAME``) beside the baselines (its report
under ``--out/on-WORKLOAD``, reused when already there), then one table: each plan's decode rate
against the reference method's (llama-server plain where it ran, else our plain decoding), pooled
over the prompts, with its 95% interval over prompts (resampled in pairs, bench/metrics.py
``spread_of_sums``); the first plan without its fallback guard (``plan-no-fallback``) and with its
lookup chain fixed at the plan's gamma (``plan-fixed-chain``) where they ran; predicted / measured
decode rate of each plan.

    .venv/bin/python measurements/transfer.py --plan specbench=P1.yaml --plan edit=P2.yaml \
        [--workloads spec-bench,humaneval,humaneval-edit] [--limit 40] [--max-new-tokens 128] \
        [--baselines plain-runtime,llama-server] [--threads N] [--out /tmp/transfer]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from specplan.bench.metrics import pooled_rate_ratio, spread_of_sums

RUNTIME_METHODS = ("plan", "plan-no-fallback", "plan-fixed-chain", "plain-runtime")  # a peer's first token comes from its prefill


def decode_step(row: dict) -> tuple[float, float] | None:
    """(tokens, seconds) of a row's decode steps, as the bench counts them; None without a rate."""
    rate = row.get("decode_tokens_per_s")
    if not rate:
        return None
    tokens = row["new_tokens"] - (0 if row["method"] in RUNTIME_METHODS else 1)
    return tokens, tokens / rate


def ratio_with_interval(rows: list[dict], method: str, reference: str) -> tuple[float, tuple | None] | None:
    """``method`` / ``reference`` pooled decode rate over the prompts both ran, and its 95% interval."""
    steps = {(row["method"], row["prompt_id"]): decode_step(row) for row in rows}
    pairs = [[*steps[method, prompt], *steps[reference, prompt]] for (name, prompt) in steps
             if name == method and steps[method, prompt] and steps.get((reference, prompt))]
    if not pairs:
        return None
    ratio = float(pooled_rate_ratio(np.asarray(pairs, dtype=float).sum(axis=0, keepdims=True))[0])
    return ratio, spread_of_sums(pairs, pooled_rate_ratio)


def run_bench(plans: dict[str, str], workload: str, report: Path, args) -> None:
    if (report / "report.json").is_file():
        return
    (first, plan), *others = plans.items()
    command = [str(Path(sys.executable).parent / "specplan"), "bench", plan, "--workload", workload,
               "--limit", str(args.limit), "--max-new-tokens", str(args.max_new_tokens),
               "--baselines", args.baselines, "--no-plots", "--report", str(report)]
    for name, other in others:
        command += ["--also", f"{name}={other}"]
    if args.threads:
        command += ["--threads", str(args.threads)]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def method_of(name: str, first: str) -> str:
    """The bench method of the plan named ``name`` (the first plan is the bench's own ``plan``)."""
    return "plan" if name == first else f"plan:{name}"


def predicted_over_measured(rows: list[dict], method: str) -> float | None:
    """The method's predicted decode rate over its pooled measured one."""
    steps = [(row, decode_step(row)) for row in rows if row["method"] == method]
    steps = [(row, step) for row, step in steps if step and row.get("predicted_tokens_per_s")]
    if not steps:
        return None
    measured = sum(t for _, (t, _) in steps) / sum(s for _, (_, s) in steps)
    return steps[0][0]["predicted_tokens_per_s"] / measured


def cell(report: Path, method: str) -> str:
    data = json.loads((report / "report.json").read_text(encoding="utf-8"))
    rows, methods = data["rows"], {row["method"] for row in data["rows"]}
    reference = "llama-server" if "llama-server" in methods else "plain-runtime"
    parts = []
    variants = {"plan-no-fallback": "unguarded", "plan-fixed-chain": "chain fixed"} if method == "plan" else {}
    for name in (method, *variants):
        found = ratio_with_interval(rows, name, reference) if name in methods else None
        if found:
            ratio, spread = found
            interval = f" ({spread[0]:.2f}-{spread[1]:.2f})" if spread else ""
            parts.append(f"{ratio:.2f}x{interval}" if name == method else f"{variants[name]} {ratio:.2f}x{interval}")
    ratio = predicted_over_measured(rows, method)
    if ratio is not None:
        parts.append(f"pred/meas {ratio:.2f}")
    return "; ".join(parts) + f" [vs {reference}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="append", required=True, metavar="NAME=PLAN")
    parser.add_argument("--workloads", default="spec-bench,humaneval,humaneval-edit")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--baselines", default="plain-runtime,llama-server")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp's threads (default every core)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/transfer"))
    parser.add_argument("--table-only", action="store_true", help="print the table of the reports already there")
    args = parser.parse_args()
    plans = dict(item.split("=", 1) for item in args.plan)
    first = next(iter(plans))
    workloads = args.workloads.split(",")
    for workload in workloads:
        if not args.table_only:
            run_bench(plans, workload, args.out / f"on-{workload}", args)
    print(f"\n| calibrated on \\ evaluated on | {' | '.join(workloads)} |")
    print("|---|" + "---|" * len(workloads))
    for name in plans:
        cells = [cell(args.out / f"on-{workload}", method_of(name, first))
                 if (args.out / f"on-{workload}" / "report.json").is_file() else "-" for workload in workloads]
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
