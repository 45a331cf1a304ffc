"""How many calibration prompts a plan's speedup needs: the per-prompt spread of the plan's
speedup over plain decoding in stored benches, and the 95% half-width of the mean it gives at
n prompts, 1.96 x (spread / mean) / sqrt(n) (docs/guide.md, "Models and the flow in detail").

    .venv/bin/python measurements/calibration_size.py [REPORT.json ...] [--counts 13,20,40]

Without reports: the stored 40-prompt benches of the Qwen pair (humaneval-edit, HumanEval,
Spec-Bench) and of the default model (Spec-Bench) on llama.cpp.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1] / "profiles"
STORED = ("cpu-qwen-llamacpp-edit-wide/bench-h128-40x128", "cpu-qwen-llamacpp-humaneval-wide/bench-40x128",
          "cpu-qwen-llamacpp-specbench-63/bench-40x128", "cpu-smollm2-llamacpp-specbench/bench-40x128")


def read_report(path: Path) -> dict:
    if path.suffix == ".gz":
        return json.loads(gzip.decompress(path.read_bytes()))
    return json.loads(path.read_text(encoding="utf-8"))


def half_widths(speedups: np.ndarray, counts: list[int]) -> tuple[float, list[float]]:
    """(spread / mean of the per-prompt speedups, the 95% half-width of the mean at each count, in %)."""
    relative = float(speedups.std(ddof=1) / speedups.mean())
    return relative, [100.0 * 1.96 * relative / np.sqrt(n) for n in counts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="*", type=Path)
    parser.add_argument("--counts", default="13,20,40")
    args = parser.parse_args()
    counts = [int(n) for n in args.counts.split(",")]
    reports = args.reports or [ROOT / name / "report.json" for name in STORED]
    print("| bench | prompts | mean speedup | spread / mean | " + " | ".join(f"+-% at {n}" for n in counts) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(counts))
    for path in reports:
        rows = read_report(path)["rows"]
        speedups = np.array([row["speedup"] for row in rows if row["method"] == "plan" and row.get("speedup")])
        relative, widths = half_widths(speedups, counts)
        print(f"| {path.parent.parent.name}/{path.parent.name} | {len(speedups)} | {speedups.mean():.2f} | "
              f"{relative:.3f} | " + " | ".join(f"{width:.1f}" for width in widths) + " |")


if __name__ == "__main__":
    main()
