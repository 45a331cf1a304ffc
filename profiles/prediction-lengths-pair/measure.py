"""In process: the plan's prediction lengths against the fixed rule's, on humaneval-edit evaluation prompts,
interleaved per prompt (decode and prefill seconds, target forwards). Usage: measure.py PLAN LIMIT [MAX_NEW]"""
import sys
import time
from dataclasses import replace

from specplan.api import Runner
from specplan.core.workloads import workload_split
from specplan.core.prompts import stratified
from specplan.models.chat import encode_prompt
from specplan.runtime.build import build_prediction_engine, fallback_guard, prediction_lengths
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.prediction import prediction_tokens

plan_path, limit = sys.argv[1], int(sys.argv[2])
max_new = int(sys.argv[3]) if len(sys.argv) > 3 else 128
with Runner.open(plan_path, threads=int(sys.argv[4]) if len(sys.argv) > 4 else 0) as runner:
    inner = runner._runner
    plan = inner.plan
    engine = inner.engine
    rule_plan = replace(plan, prediction=None)
    configs = {"planned": plan, "rule": rule_plan, "none": None, "plain": "plain"}
    print({name: prediction_lengths(engine, p) for name, p in configs.items() if name in ("planned", "rule")}, flush=True)
    tokenizer = inner.target.tokenizer
    prompts = stratified(workload_split("humaneval-edit", "evaluation"), limit)
    totals = {name: [0.0, 0, 0, 0] for name in configs}
    for index, prompt in enumerate(prompts):
        ids = encode_prompt(tokenizer, prompt.text)
        prediction = prediction_tokens(tokenizer, prompt.prediction)
        order = list(configs)[index % 4:] + list(configs)[:index % 4]
        outputs = {}
        for name in order:
            built = engine if configs[name] is None else inner.plain if name == 'plain' else \
                build_prediction_engine(engine, prediction, len(ids), guard=fallback_guard(inner.profile), plan=configs[name])
            start = time.perf_counter()
            result = built.generate(ids, max_new, SamplingConfig())
            seconds = time.perf_counter() - start
            if name in ('planned', 'rule'):
                built.drafter.settle(ids + list(result.token_ids))
                totals[name][3] += built.drafter.accepted
            totals[name][0] += seconds
            totals[name][1] += result.target_forwards
            totals[name][2] += len(result.token_ids)
            outputs[name] = result.token_ids
        same = {n: outputs[n] == outputs["plain"] for n in outputs}
        print(prompt.prompt_id, same, flush=True)
        print(index, {name: round(t[0], 2) for name, t in totals.items()}, flush=True)
    for name, (seconds, forwards, tokens, accepted) in totals.items():
        print(f"{name}: {seconds:.2f} s, {tokens} tokens, {forwards} target forwards, {accepted} prediction tokens accepted, "
              f"{tokens / seconds:.2f} tok/s")
