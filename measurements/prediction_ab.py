"""A client's prediction at several lengths in one interleaved run (runtime/drafters/prediction.py,
docs/planner-math.md section 12.6): the plan with the prediction at each ``first:min_match`` asked (and
at the lengths ``serve`` plays by default, the fixed rule, as ``rule``), the plan without a prediction
(``none``) and plain decoding, each humaneval-edit evaluation prompt decoded by all of them in a
rotating order, its function's code sent as the prediction (as measurements/serve_http.py sends it).
Per method: the pooled decode-and-prefill rate against plain decoding with its 95% interval over prompts
(resampled), target forwards, and outputs identical to plain decoding.

    [THREADS=2] .venv/bin/python measurements/prediction_ab.py PLAN PROMPTS OUT.json [METHOD,...]

METHOD: ``rule``, ``none``, ``planned`` (the plan's own ``prediction`` section) or ``FIRST:MIN_MATCH``;
default ``rule,15:3,none``. Run it on a quiet machine (nothing else timed or tested beside it).
"""
import json
import os
import random
import sys

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


def summary(rows: list[dict], names: list[str]) -> None:
    for name in names:
        tokens = sum(r[name][0] for r in rows)
        seconds = sum(r[name][1] for r in rows)
        boot, rng = [], random.Random(0)
        for _ in range(2000):
            sample = [rng.choice(rows) for _ in rows]
            boot.append((sum(r[name][0] for r in sample) / sum(r[name][1] for r in sample)) /
                        (sum(r["plain"][0] for r in sample) / sum(r["plain"][1] for r in sample)))
        boot.sort()
        plain_rate = sum(r["plain"][0] for r in rows) / sum(r["plain"][1] for r in rows)
        print(f"{name:10s} {tokens / seconds:6.2f} tok/s  {tokens / seconds / plain_rate:.3f}x plain  "
              f"95% [{boot[50]:.3f}, {boot[1950]:.3f}]  forwards {sum(r[name][2] for r in rows)}  "
              f"identical {sum(r['identical'][name] for r in rows)}/{len(rows)}")


def main() -> None:
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
