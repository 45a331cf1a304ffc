"""Plans compared in one run: the profile's target decoding alone vs the planner's overall
choice, the best one-stage plan and the best hierarchical plan (two or more stages); with
``--drafter ID`` also the best plan that uses drafter ID and the best that does not (e.g. a
distilled drafter vs the training-free ones). Spec-Bench evaluation prompts, interleaved
prompt by prompt.

Every plan is solved from the same profile (the planner's prediction is printed beside the
measurement; ``decode tok/s`` leaves out the prompt's prefill, as the prediction does) and executed by ``runtime/build.py`` exactly as ``specplan run`` would. The
reference is the runtime's own plain decoding of the same (e.g. 4-bit) target: in float32
every method's output must be token-identical to it.

    .venv/bin/python measurements/compare_plans.py PROFILE --limit 20 --max-new-tokens 64 [--dtype float32]
        [--drafter ID] [--runtime compiled] [--json OUT]

``--runtime compiled`` compiles every width's graph of the target before anything is timed
(the seconds are printed apart); transformers' own ``generate`` then runs beside as
``hf-plain``, so the table shows the speedup over both plain decodings.

``--dtype float32`` runs the profile's plans with the target in float32 compute (token
identity is exact there), whatever dtype the profile measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings

from specplan.core.quiet import quiet_libraries

quiet_libraries(verbose=False)  # before torch and the 4-bit backends import: no library chatter

import torch  # noqa: E402

from specplan.planner.options import RUNTIME_MAX_STAGES, RUNTIME_SHAPES
from specplan.planner import PlanOptions, solve_plan
from specplan.planner.solve import plan_for_candidate
from specplan.core.profile import load_profile
from specplan.core.prompts import stratified
from specplan.core.workloads import WORKLOADS, workload_split
from specplan.bench.run import interleave, warm_up
from specplan.bench.methods import EngineMethod
from specplan.runtime.build import build_engine, eos_ids
from specplan.models.chat import encode_prompt
from specplan.runtime.compile.warmup import compile_buckets
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import SpeculativeEngine
from specplan.core.runtime_modes import runtime_from_environment
from specplan.models.load import quiet_transformers
from specplan.quant.load import load_model_variant
from specplan.bench.peers import GenerateMethod


def _uses(candidate, drafter: str) -> bool:
    return any(drafter in (stage.drafter, stage.verifier, stage.shape.graft) for stage in candidate.stages)


def contenders(profile, drafter: str | None = None) -> dict:
    """name -> plan: the overall best, the best one-stage and the best multi-stage plan; with
    ``drafter``, the best plan using it and the best plan without it."""
    options = PlanOptions(max_budget=64, max_depth=8, gammas=tuple(range(1, 9)), shapes=RUNTIME_SHAPES,
                          max_stages=RUNTIME_MAX_STAGES)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = solve_plan(profile, options, profile_path="", profile_sha256="")
    plans = {"planner": result.plan}
    single = next((c for c in result.candidates if len(c.stages) == 1), None)
    multi = next((c for c in result.candidates if len(c.stages) >= 2), None)
    if single is not None:
        plans["best-single"] = plan_for_candidate(result, single)
    if multi is not None:
        plans["best-hierarchy"] = plan_for_candidate(result, multi)
    if drafter is not None:
        using = next((c for c in result.candidates if _uses(c, drafter)), None)
        without = next((c for c in result.candidates if c.stages and not _uses(c, drafter)), None)
        for name, candidate in ((f"best-with-{drafter}", using), (f"best-without-{drafter}", without)):
            if candidate is not None:
                plans[name] = plan_for_candidate(result, candidate)
    unique = {}
    for name, plan in plans.items():  # one method per distinct configuration, the first name wins
        if all(plan.stages != kept.stages for kept in unique.values()):
            unique[name] = plan
    return unique


def summarize(rows, methods, predicted) -> list[dict]:
    table = []
    for method in methods:
        mine = [row for row in rows if row.method == method.name]
        tokens = sum(row.measurement.new_tokens for row in mine)
        seconds = sum(row.measurement.seconds for row in mine)
        forwards = sum(row.measurement.target_forwards for row in mine)
        decode = [row.measurement.decode_seconds for row in mine]
        decode_rate = round(tokens / sum(decode), 2) if all(decode) else None  # after the prefill, as predicted
        split = {}  # ms per target forward, beside the planner's draft_ms and verify_ms
        for name, attribute in (("draft_ms_per_forward", "draft_seconds"), ("verify_ms_per_forward", "verify_forward_seconds")):
            values = [getattr(row.measurement, attribute) for row in mine]
            if all(value is not None for value in values) and forwards:
                split[name] = round(1000 * sum(values) / forwards, 3)
        table.append({
            "method": method.name, "configuration": method.description,
            "tokens_per_s": round(tokens / seconds, 2), "decode_tokens_per_s": decode_rate,
            "predicted_tokens_per_s": round(predicted.get(method.name, 0.0), 2),
            "median_speedup": round(statistics.median(row.speedup for row in mine), 3),
            "accepted_per_target_forward": round(tokens / max(1, forwards), 3),
            "identical": sum(1 for row in mine if row.check is not None and row.check.identical), "prompts": len(mine),
            **split,
        })
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--workload", default="spec-bench", choices=WORKLOADS, help="evaluation prompts")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--dtype", default=None, help="target compute dtype (default: the profile's)")
    parser.add_argument("--quant", default=None,
                        help="load the target at this precision instead of the profile's (none | nf4 | gptq): runs the "
                             "same plans, e.g. NF4 in float32 for exact token identity (GPTQ's CPU kernel computes in "
                             "bfloat16 whatever --dtype says)")
    parser.add_argument("--drafter", default=None, help="also compare the best plans with and without this drafter id")
    parser.add_argument("--only", default=None, help="comma list of plan names to run beside plain (e.g. best-hierarchy)")
    parser.add_argument("--json", default=None, help="write the table and per-prompt rows here")
    parser.add_argument("--runtime", choices=("eager", "static", "compiled", "jit"), default=None,
                        help="the runtime of every plan and of plain (default: SPECPLAN_RUNTIME, else eager)")
    args = parser.parse_args()
    runtime = runtime_from_environment(args.runtime)
    quiet_transformers()
    profile = load_profile(args.profile)
    device = torch.device("cpu")
    entry = profile.target
    target = load_model_variant(entry.source, args.dtype or entry.dtype, str(device), quant=args.quant or entry.quant)
    sampling = SamplingConfig()
    plain = SpeculativeEngine(target.model, device, eos_ids(target), runtime=runtime)
    methods = [EngineMethod("plain", "plain", plain, sampling, f"{entry.id} ({args.quant or entry.quant}, {target.dtype}) alone")]
    plans = contenders(profile, args.drafter)
    best = plans["planner"].predicted
    if args.only:
        plans = {name: plan for name, plan in plans.items() if name in args.only.split(",")}
    predicted = {"plain": best.tokens_per_s / best.speedup}  # 1000 / T_target(1)
    for name, plan in plans.items():
        methods.append(EngineMethod(name, "plan", build_engine(plan, profile, target, device, runtime), sampling, plan.summary()))
        predicted[name] = plan.predicted.tokens_per_s
    prompts = stratified(workload_split(args.workload, "evaluation"), args.limit)
    encoded = [(prompt, encode_prompt(target.tokenizer, prompt.text)) for prompt in prompts]
    if runtime.compiled:
        seconds = compile_buckets(target.model, device, encoded[0][1], runtime)
        print(f"compiled runtime: {seconds:.0f} s compiling the target's graphs before the timed runs")
        methods.append(GenerateMethod("hf-plain", "peer", target.model, device, eos_ids(target), sampling,
                                      "transformers generate, the target alone"))
    warm_up(methods, encoded[0][1], 8)
    rows = interleave(methods, encoded, args.max_new_tokens, "plain", target.model, sampling, predicted, "hierarchy bench")
    table = summarize(rows, methods, predicted)
    hf_plain = next((line["tokens_per_s"] for line in table if line["method"] == "hf-plain"), None)
    for line in table:
        line["over_hf_plain"] = round(line["tokens_per_s"] / hf_plain, 3) if hf_plain else None
    print(f"target {entry.id}: {entry.source} quant={args.quant or entry.quant} dtype={target.dtype}, {len(prompts)} evaluation prompts, "
          f"{args.max_new_tokens} new tokens, {torch.get_num_threads()} threads")
    print("| method | configuration | tok/s | decode tok/s | predicted tok/s | median speedup over plain | "
          "tok/s over hf-plain | accepted/forward | draft ms/forward | verify ms/forward | identical |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for line in table:
        print(f"| {line['method']} | {line['configuration']} | {line['tokens_per_s']} | "
              f"{line['decode_tokens_per_s'] or '-'} | {line['predicted_tokens_per_s']} | "
              f"{line['median_speedup']} | {line['over_hf_plain'] or '-'} | {line['accepted_per_target_forward']} | "
              f"{line.get('draft_ms_per_forward', '-')} | {line.get('verify_ms_per_forward', '-')} | "
              f"{line['identical']}/{line['prompts']} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"table": table, "rows": [{"prompt_id": r.prompt_id, "category": r.category, "method": r.method,
                                                 "tokens_per_s": round(r.measurement.tokens_per_s, 3),
                                                 "speedup": round(r.speedup, 4)} for r in rows]}, handle, indent=1)


if __name__ == "__main__":
    main()
