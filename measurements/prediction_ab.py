"""A client's prediction at several lengths in one interleaved run (runtime/drafters/prediction.py,
docs/planner-math.md section 12.6): the plan with the prediction at each ``first:min_match`` asked (and
at the lengths ``serve`` plays by default, the fixed rule, as ``rule``), the plan without a prediction
(``none``) and plain decoding, each humaneval-edit evaluation prompt decoded by all of them in a
rotating order, its function's code sent as the prediction (as measurements/serve_http.py sends it).
Per method: the pooled decode-and-prefill rate against plain decoding and against the first method asked
for, each with its 95% interval over prompts (resampled in pairs), target forwards, and outputs identical to
plain decoding.

    [THREADS=2] .venv/bin/python measurements/prediction_ab.py PLAN PROMPTS OUT.json [METHOD,...]
    .venv/bin/python measurements/prediction_ab.py --summary OUT.json [REFERENCE]  # a stored run again

METHOD: ``rule``, ``none``, ``planned`` (the plan's own ``prediction`` section) or ``FIRST:MIN_MATCH``;
default ``rule,15:3,none``. Run it on a quiet machine (nothing else timed or tested beside it).
"""
import json
import os
import sys

import numpy as np

from specplan.bench.metrics import pooled_rate_ratio, spread_of_sums

from specplan.api import Runner
from specplan.core.prompts import stratified
from specplan.core.workloads import workload_split
from specplan.models.chat import encode_messages
from specplan.runtime.build import build_prediction_engine, fallback_guard, prediction_lengths
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.prediction import prediction_tokens


def lengths_of(method: str, runner) -> tuple[int, int] | None:
    """``(first, min_match)`` a method drafts its prediction at; None for ``none``."""
    if method == "none":
        return None
    if method == "rule":
        return prediction_lengths(runner.engine)
    if method == "planned":
        if runner.plan.prediction is None:
            sys.exit("prediction_ab: the plan has no prediction section; re-run `specplan plan` on a profile with one")
        return runner.plan.prediction.first, runner.plan.prediction.min_match
    first, min_match = method.split(":")
    return int(first), int(min_match)


def decode(runner, method: str, lengths, ids: list[int], prediction: list[int]):
    """One request's result under ``method``: plain decoding, the plan, or the plan with the prediction."""
    if method == "plain":
        return runner.plain.generate(ids, 128, SamplingConfig())
    if lengths is None:
        return runner.engine.generate(ids, 128, SamplingConfig())
    engine = build_prediction_engine(runner.engine, prediction, len(ids), guard=fallback_guard(runner.profile),
                                     lengths=lengths)
    return engine.generate(ids, 128, SamplingConfig())


def summary(rows: list[dict], names: list[str], reference: str | None = None) -> None:
    """Per method: its pooled rate, over plain decoding's and over ``reference``'s (default: the first method
    asked for), each with its 95% interval over prompts, resampled in pairs (bench/metrics.py
    ``spread_of_sums``)."""
    reference = reference or names[1]
    for name in names:
        rate = sum(r[name][0] for r in rows) / sum(r[name][1] for r in rows)
        print(f"{name:10s} {rate:6.2f} tok/s  {rate_line(rows, name, 'plain')}  over {reference} {rate_line(rows, name, reference)}  "
              f"forwards {sum(r[name][2] for r in rows)}  identical {sum(r['identical'][name] for r in rows)}/{len(rows)}")


def rate_line(rows: list[dict], name: str, reference: str) -> str:
    """``name``'s pooled rate over ``reference``'s, and its interval over prompts."""
    columns = [[*row[name][:2], *row[reference][:2]] for row in rows]
    ratio = float(pooled_rate_ratio(np.asarray(columns, dtype=float).sum(axis=0, keepdims=True))[0])
    low, high = spread_of_sums(columns, pooled_rate_ratio) or (ratio, ratio)
    return f"{ratio:.3f}x [{low:.3f}, {high:.3f}]"


def main() -> None:
    if sys.argv[1] == "--summary":  # a stored run, printed again
        rows = json.loads(open(sys.argv[2]).read())
        summary(rows, ["plain"] + [name for name in rows[0]["identical"] if name != "plain"],
                sys.argv[3] if len(sys.argv) > 3 else None)
        return
    plan_path, count, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    methods = sys.argv[4].split(",") if len(sys.argv) > 4 else ["rule", "15:3", "none"]
    runner = Runner.open(plan_path, threads=int(os.environ.get("THREADS", "2"))).plan_runner
    tokenizer = runner.target.tokenizer
    lengths = {method: lengths_of(method, runner) for method in methods}
    print("lengths (first, min_match):", lengths, flush=True)
    names = ["plain"] + methods
    prompts = stratified(workload_split("humaneval-edit", "evaluation"), count)
    warm = encode_messages(tokenizer, [{"role": "user", "content": prompts[0].text}])
    for name in names:
        decode(runner, name, lengths.get(name), warm, prediction_tokens(tokenizer, prompts[0].prediction))
    rows = []
    for index, prompt in enumerate(prompts):
        ids = encode_messages(tokenizer, [{"role": "user", "content": prompt.text}])
        prediction = prediction_tokens(tokenizer, prompt.prediction)
        results = {}
        for name in names[index % len(names):] + names[:index % len(names)]:
            result = decode(runner, name, lengths.get(name), ids, prediction)
            results[name] = (len(result.token_ids), result.seconds, len(result.committed_per_forward),
                             list(result.token_ids))
        rows.append({"prompt": prompt.prompt_id, "category": prompt.category,
                     **{name: value[:3] for name, value in results.items()},
                     "identical": {name: results[name][3] == results["plain"][3] for name in names}})
        print(index, prompt.prompt_id, {name: (round(v[1], 2), v[2]) for name, v in results.items()}, flush=True)
    with open(out, "w") as handle:
        json.dump(rows, handle)
    summary(rows, names)


if __name__ == "__main__":
    main()
