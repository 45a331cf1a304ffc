"""The roofline and the planner held against published GPU results: ``specplan predict`` over every
setting in measurements/published-settings/ (Sequoia, SpecMQuant, EAGLE-3; each file names its
table), one row per setting, then per source the median and worst predicted / measured ratio and
the share within 0.8-1.25, and the direction checks of docs/planner-math.md section 13.

    .venv/bin/python measurements/published.py [FILE...] [--json OUT]

Goals: predicted / measured within 0.8-1.25 on at least 80% of the settings; every direction right
(4-bit gain below 16-bit on one GPU, below on the 3090 than on the A100; the gain falling with the
batch; the planner's tree no bigger for a bigger target or on the GPU where the source's was smaller).
No GPU is needed: everything is modelled from datasheets (planner/data/skus.yaml) and the files.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from specplan.api import predict
from specplan.cli.predict import record, worst
from specplan.core.published import shape_label

SETTINGS = Path(__file__).resolve().parent / "published-settings"


def source_of(name: str) -> str:
    """The source a setting belongs to: the first word of its name (sequoia, specmquant, eagle3)."""
    return name.split("-")[0]


def directions(by_name: dict) -> list[tuple[str, bool]]:
    """Each direction a source reports, and whether the predictions keep it."""
    gain = {name: p.predicted_speedup for name, p in by_name.items()}
    size = {name: p.chosen.get("budget", 0) for name, p in by_name.items()}
    checks = []
    for gpu in ("a100", "rtx3090"):
        fp16, w4 = (f"specmquant-{gpu}-llama3-8b-{p}-eagle2" for p in ("fp16", "w4a16"))
        if fp16 in gain and w4 in gain:
            checks.append((f"{gpu}: W4A16 gain < FP16 gain (SpecMQuant)", gain[w4] < gain[fp16]))
    a100, rtx = "specmquant-a100-llama3-8b-w4a16-eagle2", "specmquant-rtx3090-llama3-8b-w4a16-eagle2"
    if a100 in gain and rtx in gain:
        checks.append(("W4A16 gain: RTX 3090 < A100 (SpecMQuant)", gain[rtx] < gain[a100]))
    for method in ("eagle", "eagle3"):
        names = [f"eagle3-sglang-h100-llama31-8b-{method}-b{b}" for b in (1, 2, 4, 8, 16, 24, 32, 48, 56, 64)]
        if all(name in gain for name in names):
            values = [gain[name] for name in names]
            checks.append((f"{method}: gain falls with batch 1..64 (EAGLE-3 Tables 3, 4)",
                           all(b < a for a, b in zip(values, values[1:]))))
    for data in ("c4-t0", "owt-t0", "cnn-t0"):
        names = [f"sequoia-a100-{t}-{data}" for t in ("llama2-7b", "llama2-13b", "vicuna-33b")]
        if all(name in size for name in names):
            sizes = [size[name] for name in names]
            checks.append((f"A100 {data}: tree 7B >= 13B >= 33B (Sequoia: 128, 64, 64)", sizes == sorted(sizes, reverse=True)))
        a100, l40 = f"sequoia-a100-llama2-7b-{data}", f"sequoia-l40-llama2-7b-{data}"
        if a100 in size and l40 in size:
            checks.append((f"7B {data}: tree A100 > L40 (Sequoia: 128, 64)", size[a100] > size[l40]))
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("settings", nargs="*", help="setting files (default: measurements/published-settings/*.yaml)")
    parser.add_argument("--json", default=None, metavar="OUT", help="also write the records as a JSON list")
    args = parser.parse_args()
    paths = args.settings or sorted(str(path) for path in SETTINGS.glob("*.yaml"))
    predictions = [predict(path) for path in paths]
    print(f"{'setting':<44} {'shape':>11} {'measured':>8} {'predicted':>9} {'ratio':>6} {'chosen':>11} {'its pred':>8}")
    for p in predictions:
        print(f"{p.name:<44} {p.measured.label:>11} {p.measured_speedup:>7.2f}x {p.predicted_speedup:>8.2f}x "
              f"{p.ratio:>6.2f} {shape_label(p.chosen):>11} {p.chosen_predicted_speedup:>7.2f}x")
    print()
    sources = sorted({source_of(p.name) for p in predictions})
    for source in sources + ["all"]:
        ratios = [p.ratio for p in predictions if source in ("all", source_of(p.name))]
        inside = sum(0.8 <= ratio <= 1.25 for ratio in ratios)
        print(f"{source:<12} settings {len(ratios):>3}  median {statistics.median(ratios):.2f}  worst {worst(ratios):.2f}  "
              f"within 0.8-1.25: {inside}/{len(ratios)} ({inside / len(ratios):.0%})")
    print()
    for label, kept in directions({p.name: p for p in predictions}):
        print(f"{'right' if kept else 'WRONG'}  {label}")
    if args.json:
        Path(args.json).write_text(json.dumps([record(p) for p in predictions], indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
