"""``specplan predict FILE...``: the roofline's and planner's speedup for published settings, beside
what the source measured (docs/guide.md, "Predicting a GPU you do not own")."""

from __future__ import annotations

import json
import statistics

from specplan.core.published import shape_label


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "predict", help="predict published speculation settings on their GPUs (roofline + planner) beside the measured speedup")
    parser.add_argument("settings", nargs="+", metavar="FILE", help="published-setting .yaml files (docs/formats.md)")
    parser.add_argument("--json", action="store_true", help="one JSON object per setting, one per line")
    parser.set_defaults(handler="predict")


def worst(ratios: list[float]) -> float:
    """The predicted / measured ratio farthest from 1 on a log scale (0.5 and 2.0 are as bad)."""
    return max(ratios, key=lambda ratio: max(ratio, 1.0 / ratio))


def record(prediction) -> dict:
    """The ``--json`` object of one prediction (keys documented in docs/formats.md)."""
    return {"name": prediction.name, "sku": prediction.sku, "batch": prediction.batch,
            "measured_shape": prediction.measured.record,
            "measured_speedup": prediction.measured_speedup,
            "predicted_speedup": round(prediction.predicted_speedup, 4), "ratio": round(prediction.ratio, 4),
            "accepted_length": round(prediction.accepted_length, 4), "top_rate": round(prediction.top_rate, 4),
            "plain_ms": round(prediction.plain_ms, 4), "baseline_ms": prediction.baseline_ms or None,
            "chosen_shape": prediction.chosen,
            "chosen_predicted_speedup": round(prediction.chosen_predicted_speedup, 4)}


def command(args) -> int:
    """Predict every setting; a table (or JSON lines) and the median and worst ratio."""
    from specplan.api import predict

    predictions = [predict(path) for path in args.settings]
    if args.json:
        for prediction in predictions:
            print(json.dumps(record(prediction)))
        return 0
    print(f"{'setting':<40} {'sku':<15} {'b':>3} {'shape':>11} {'measured':>8} {'predicted':>9} {'ratio':>6} "
          f"{'T(1) ms':>8} {'chosen':>11} {'its pred':>8}")
    for p in predictions:
        print(f"{p.name:<40} {p.sku:<15} {p.batch:>3} {p.measured.label:>11} {p.measured_speedup:>7.2f}x "
              f"{p.predicted_speedup:>8.2f}x {p.ratio:>6.2f} {p.plain_ms:>8.2f} {shape_label(p.chosen):>11} "
              f"{p.chosen_predicted_speedup:>7.2f}x")
    ratios = [p.ratio for p in predictions]
    inside = sum(0.8 <= ratio <= 1.25 for ratio in ratios)
    print(f"predicted / measured: median {statistics.median(ratios):.2f}, worst {worst(ratios):.2f}, "
          f"{inside} of {len(ratios)} within 0.8-1.25")
    return 0
