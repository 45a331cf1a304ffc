"""The transfer matrix: plans calibrated on one workload, each evaluated on every workload.

For each ``--plan NAME=PLAN.yaml`` and each evaluation workload, one interleaved ``specplan bench``
run (its report under ``--out/NAME-on-WORKLOAD``, reused when already there), then one table: the
plan's decode rate against the reference method's (llama-server plain where it ran, else our plain
decoding), pooled over the prompts, with its 95% interval over prompts (resampled in pairs,
bench/metrics.py ``spread_of_sums``); the same for the plan without its fallback guard
(``plan-no-fallback``); predicted / measured decode rate of the plan.

    .venv/bin/python measurements/transfer.py --plan specbench=P1.yaml --plan edit=P2.yaml \
        [--workloads spec-bench,humaneval,humaneval-edit] [--limit 16] [--max-new-tokens 128] \
        [--baselines plain-runtime,plan-no-fallback,llama-server] [--out /tmp/transfer]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from specplan.bench.metrics import pooled_rate_ratio, spread_of_sums

RUNTIME_METHODS = ("plan", "plan-no-fallback", "plain-runtime")  # a peer's first token comes from its prefill


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


def run_bench(plan: Path, workload: str, report: Path, args) -> None:
    if (report / "report.json").is_file():
        return
    command = [str(Path(sys.executable).parent / "specplan"), "bench", str(plan), "--workload", workload,
               "--limit", str(args.limit), "--max-new-tokens", str(args.max_new_tokens),
               "--baselines", args.baselines, "--no-plots", "--report", str(report)]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def cell(report: Path) -> str:
    data = json.loads((report / "report.json").read_text(encoding="utf-8"))
    rows, methods = data["rows"], {row["method"] for row in data["rows"]}
    reference = "llama-server" if "llama-server" in methods else "plain-runtime"
    parts = []
    for method in ("plan", "plan-no-fallback"):
        found = ratio_with_interval(rows, method, reference) if method in methods else None
        if found:
            ratio, spread = found
            interval = f" ({spread[0]:.2f}-{spread[1]:.2f})" if spread else ""
            parts.append(f"{ratio:.2f}x{interval}" if method == "plan" else f"unguarded {ratio:.2f}x")
    quality = data.get("plan_quality") or {}
    if quality.get("predicted_over_measured"):
        parts.append(f"pred/meas {quality['predicted_over_measured']:.2f}")
    return "; ".join(parts) + f" [vs {reference}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", action="append", required=True, metavar="NAME=PLAN")
    parser.add_argument("--workloads", default="spec-bench,humaneval,humaneval-edit")
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--baselines", default="plain-runtime,plan-no-fallback,llama-server")
    parser.add_argument("--out", type=Path, default=Path("/tmp/transfer"))
    parser.add_argument("--table-only", action="store_true", help="print the table of the reports already there")
    args = parser.parse_args()
    plans = dict(item.split("=", 1) for item in args.plan)
    workloads = args.workloads.split(",")
    for name, plan in plans.items():
        for workload in workloads:
            if not args.table_only:
                run_bench(Path(plan), workload, args.out / f"{name}-on-{workload}", args)
    print(f"\n| calibrated on \\ evaluated on | {' | '.join(workloads)} |")
    print("|---|" + "---|" * len(workloads))
    for name in plans:
        cells = [cell(args.out / f"{name}-on-{workload}") if (args.out / f"{name}-on-{workload}" / "report.json").is_file()
                 else "-" for workload in workloads]
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
