"""The plan per target precision: does the planner's choice change with the precision?

A quant-aware profile (``specplan profile --quant gptq --quant nf4 --quant none``) holds the
target's T(n) in its first precision and the others as variants (``target-nf4``,
``target-bfloat16``). Here each variant in turn is made the target, with the drafters'
acceptance as measured against the profiled target (an approximation: a 4-bit target's greedy
tokens differ a little from a bf16 one's, docs/guide.md "4-bit targets"), and the planner
solves it with its default options. Printed per precision: T(n) at n = 1..64, plain decoding
tokens/s predicted from T(1), the plan and its predicted speedup. No model is loaded.

    .venv/bin/python measurements/precision_plans.py profiles/cpu-qwen-gptq/profile.yaml
"""

from __future__ import annotations

import argparse
import warnings
from dataclasses import replace

from specplan.core.profile import Profile, load_profile
from specplan.planner import PlanOptions, PlannerWarning, solve_plan


def with_target(profile: Profile, variant_id: str) -> Profile:
    """``profile`` with the variant ``variant_id`` as its target (id ``target``) and the other
    precisions dropped; acceptance entries against ``target`` are kept as they are."""
    variant = next(model for model in profile.models if model.id == variant_id)
    models = [replace(variant, id="target", role="target")]
    models += [model for model in profile.models if model.role not in ("target", "variant")]
    return replace(profile, models=tuple(models))


def precisions(profile: Profile) -> list[tuple[str, Profile]]:
    """(label, profile solved for that precision), the profiled target first."""
    target = profile.target
    result = [(f"{target.quant} ({target.dtype})", with_target(profile, target.id))]
    for model in profile.models:
        if model.role == "variant":
            result.append((f"{model.quant} ({model.dtype})", with_target(profile, model.id)))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", help="a profile with target variants (specplan profile --quant A --quant B ...)")
    args = parser.parse_args()
    profile = load_profile(args.profile)
    rows = precisions(profile)
    if len(rows) == 1:
        raise SystemExit(f"{args.profile} has no target variants; profile with --quant gptq --quant nf4 --quant none")
    curve = profile.target.latency[0]
    print(f"| precision | {' | '.join(f'T({n}) ms' for n in curve.n)} | plain tok/s | plan | predicted speedup |")
    print("|---|" + "---|" * (len(curve.n) + 3))
    for label, solved_profile in rows:
        latency = solved_profile.target.latency[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PlannerWarning)  # pairs the profile did not measure
            plan = solve_plan(solved_profile, PlanOptions()).plan
        times = " | ".join(f"{ms:.1f}" for ms in latency.ms)
        print(f"| {label} | {times} | {1000 / latency.ms[0]:.2f} | {plan.summary()} | {plan.predicted.speedup:.2f}x |")


if __name__ == "__main__":
    main()
