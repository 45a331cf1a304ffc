"""Adaptive plans measured: the closed-loop plan vs the static plan vs the best static
configuration chosen per category in hindsight (the oracle), in one interleaved run over
Spec-Bench evaluation prompts, per category; plus the time spent scoring and re-planning per
round as a share of round time, and token identity with the switches counted.

Every candidate of the adaptive plan also runs as a static configuration (``candidate-i``); the
oracle of a category is the candidate with the most tokens/s there. Reference: the runtime's
plain decoding of the same prompt (token identity is checked against it; exact in float32).

    .venv/bin/python measurements/adaptive.py [PROFILE] --limit 40 --max-new-tokens 128 [--dtype float32]
        [--every K] [--json OUT]

Goals, what an adaptive plan must show to be worth re-planning: adaptive >= static on every
category, >= 0.95 of the oracle overall, overhead < 2% of round time, float32 output identical to
plain decoding on every prompt.
"""

from __future__ import annotations

import argparse
import json
import warnings
from dataclasses import replace

from specplan.core.quiet import quiet_libraries

quiet_libraries(verbose=False)  # before torch imports: no library chatter

import torch  # noqa: E402

from specplan.bench.methods import EngineMethod  # noqa: E402
from specplan.bench.run import interleave, warm_up  # noqa: E402
from specplan.core.profile import load_profile  # noqa: E402
from specplan.core.prompts import stratified  # noqa: E402
from specplan.core.runtime_modes import runtime_from_environment  # noqa: E402
from specplan.core.workloads import WORKLOADS, workload_split  # noqa: E402
from specplan.models.chat import encode_prompt  # noqa: E402
from specplan.models.load import quiet_transformers  # noqa: E402
from specplan.planner.adaptive_plan import make_adaptive  # noqa: E402
from specplan.planner.options import runtime_options  # noqa: E402
from specplan.planner.solve import solve_plan  # noqa: E402
from specplan.quant.load import load_model_variant  # noqa: E402
from specplan.runtime.adaptive_build import build_adaptive_engine  # noqa: E402
from specplan.runtime.build import build_engine, eos_ids  # noqa: E402
from specplan.runtime.drafters.base import SamplingConfig  # noqa: E402
from specplan.runtime.engine import SpeculativeEngine  # noqa: E402


class Recorded:
    """An adaptive engine whose results are kept (bench methods keep only the measurement)."""

    def __init__(self, engine):
        self.engine, self.results = engine, []
        self.target, self.drafter = engine.target, engine.drafter

    def generate(self, *args, **kwargs):
        result = self.engine.generate(*args, **kwargs)
        self.results.append(result)
        return result


def rate(rows, method: str, category: str | None = None) -> tuple[int, float]:
    """(tokens, seconds) of ``method`` over the rows (of one category)."""
    mine = [r for r in rows if r.method == method and (category is None or r.category == category)]
    return sum(r.measurement.new_tokens for r in mine), sum(r.measurement.seconds for r in mine)


def per_category(rows, candidates: list[str], plain_again: str | None = None) -> tuple[dict, dict]:
    """Per category and overall: adaptive, static and oracle tok/s. ``plain_again`` (the candidate
    that is plain decoding) gives each category's noise: the same configuration measured twice,
    ``plain_again / plain``; the overall band is its range over the categories."""
    table, oracle_total = {}, [0, 0.0]
    for category in sorted({r.category for r in rows}):
        speeds = {}
        for method in ["adaptive", *candidates, "plain"]:
            tokens, seconds = rate(rows, method, category)
            speeds[method] = tokens / seconds if seconds else 0.0
        oracle = max(candidates, key=lambda name: speeds[name])
        tokens, seconds = rate(rows, oracle, category)
        oracle_total[0] += tokens
        oracle_total[1] += seconds
        table[category] = {"adaptive": round(speeds["adaptive"], 2), "static": round(speeds["candidate-0"], 2),
                           "oracle": round(speeds[oracle], 2), "oracle_configuration": oracle,
                           "plain": round(speeds["plain"], 2),
                           "adaptive_over_static": round(speeds["adaptive"] / max(speeds["candidate-0"], 1e-9), 3),
                           "adaptive_over_oracle": round(speeds["adaptive"] / max(speeds[oracle], 1e-9), 3)}
        if plain_again is not None:
            table[category]["plain_over_plain"] = round(speeds[plain_again] / max(speeds["plain"], 1e-9), 3)
    tokens, seconds = rate(rows, "adaptive")
    static_tokens, static_seconds = rate(rows, "candidate-0")
    overall = {"adaptive": round(tokens / seconds, 2), "static": round(static_tokens / static_seconds, 2),
               "oracle_per_category": round(oracle_total[0] / oracle_total[1], 2)}
    overall["adaptive_over_static"] = round(overall["adaptive"] / overall["static"], 3)
    overall["adaptive_over_oracle"] = round(overall["adaptive"] / overall["oracle_per_category"], 3)
    overall["categories_at_or_above_static"] = sum(1 for line in table.values() if line["adaptive_over_static"] >= 1)
    if plain_again is not None:
        band = [min(line["plain_over_plain"] for line in table.values()),
                max(line["plain_over_plain"] for line in table.values())]
        overall["noise_band"] = band
        overall["categories_below_static_past_noise"] = sorted(
            category for category, line in table.items() if line["adaptive_over_static"] < band[0])
    return table, overall


def overhead(results) -> dict:
    """Scoring (reading the target's forwards, replaying the drafters) + re-planning time per round,
    and its share of the requests' whole time (prefill included: one forward among ~100 rounds)."""
    rounds = sum(r.target_forwards for r in results)
    spent = sum(r.adaptive_seconds for r in results)
    decode = sum(r.seconds for r in results)
    reading = sum(r.reading_seconds for r in results)
    return {"rounds": rounds, "seconds": round(spent, 4), "ms_per_round": round(1000 * spent / max(rounds, 1), 4),
            "ms_per_round_reading_forwards": round(1000 * reading / max(rounds, 1), 4),
            "ms_per_round_between_rounds": round(1000 * (spent - reading) / max(rounds, 1), 4),
            "share_of_round_time": round(spent / decode, 4) if decode else None,
            "switches": sum(r.switches for r in results), "replans": sum(r.replans for r in results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", nargs="?", default="profiles/cpu/profile.yaml")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--workload", default="spec-bench", choices=WORKLOADS, help="evaluation prompts")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default=None, help="target compute dtype (default: the profile's; float32: exact identity)")
    parser.add_argument("--every", type=int, default=16, help="re-plan every K target rounds")
    parser.add_argument("--json", default=None, help="write the tables and per-prompt rows here")
    args = parser.parse_args()
    runtime = runtime_from_environment(None)
    quiet_transformers()
    profile = load_profile(args.profile)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = solve_plan(profile, runtime_options(), profile_path="", profile_sha256="")
    plan = make_adaptive(result.plan, result.candidates, profile, every=args.every)
    device = torch.device("cpu")
    target = load_model_variant(profile.target.source, args.dtype or profile.target.dtype, str(device),
                                quant=profile.target.quant)
    sampling = SamplingConfig()
    adaptive = Recorded(build_adaptive_engine(plan, profile, target, device, runtime))
    methods = [EngineMethod("plain", "plain", SpeculativeEngine(target.model, device, eos_ids(target), runtime=runtime),
                            sampling, "plain decoding"),
               EngineMethod("adaptive", "plan", adaptive, sampling, "adaptive: " + plan.summary())]
    names = []
    for index, candidate in enumerate(plan.adaptive.candidates):
        static = replace(plan, stages=candidate.stages, adaptive=None)
        names.append(f"candidate-{index}")
        methods.append(EngineMethod(names[-1], "grid", build_engine(static, profile, target, device, runtime), sampling,
                                    static.summary()))
    prompts = stratified(workload_split(args.workload, "evaluation"), args.limit)
    encoded = [(prompt, encode_prompt(target.tokenizer, prompt.text)) for prompt in prompts]
    warm_up(methods, encoded[0][1], 8)
    adaptive.results.clear()
    rows = interleave(methods, encoded, args.max_new_tokens, "plain", target.model, sampling, {}, "adaptive bench")
    plain_again = next((name for name, c in zip(names, plan.adaptive.candidates) if not c.stages), None)
    table, overall = per_category(rows, names, plain_again)
    for category, line in table.items():
        line["switches"] = sum(r.switches for (p, _), r in zip(encoded, adaptive.results) if p.category == category)
    report = {
        "settings": {"profile": args.profile, "prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
                     "dtype": target.dtype, "threads": torch.get_num_threads(), "every": args.every},
        "candidates": {name: m.description for name, m in zip(names, methods[2:])},
        "categories": table, "overall": overall, "overhead": overhead(adaptive.results),
        "identical": {m.name: sum(1 for r in rows if r.method == m.name and r.check is not None and r.check.identical)
                      for m in methods},
        # outputs that part from plain decoding where the target's top-2 gap is below NEAR_TIE (bf16 noise)
        "near_ties": {m.name: sum(1 for r in rows if r.method == m.name and r.check is not None and r.check.near_tie)
                      for m in methods},
        "configurations": [{"prompt_id": p.prompt_id, "category": p.category,
                            "ran": [use.as_record() for use in r.configurations], "switches": r.switches}
                           for (p, _), r in zip(encoded, adaptive.results)],
    }
    print(json.dumps({k: report[k] for k in ("settings", "overall", "overhead", "identical", "near_ties")}, indent=1))
    print("| category | adaptive tok/s | static | oracle (which) | adaptive/static | adaptive/oracle "
          "| plain/plain (noise) | switches |")
    print("|---|---|---|---|---|---|---|---|")
    for category, line in table.items():
        print(f"| {category} | {line['adaptive']} | {line['static']} | {line['oracle']} ({line['oracle_configuration']}) "
              f"| {line['adaptive_over_static']} | {line['adaptive_over_oracle']} | {line.get('plain_over_plain', '')} "
              f"| {line['switches']} |")
    if args.json:
        report["rows"] = [{"prompt_id": r.prompt_id, "category": r.category, "method": r.method,
                           "tokens_per_s": round(r.measurement.tokens_per_s, 3), "speedup": round(r.speedup, 4),
                           "identical": None if r.check is None else r.check.identical,
                           "near_tie": None if r.check is None else r.check.near_tie} for r in rows]
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=1)


if __name__ == "__main__":
    main()
