"""``specplan plan PROFILE``: solve for the fastest configuration and write plan.yaml
(``--sku``: plans for a named device, :mod:`specplan.cli.plan_sku`)."""

from __future__ import annotations

import os
from pathlib import Path

from specplan.api import solve_detailed
from specplan.core.outputs import check_output_file
from specplan.core.plan import Plan, save_plan
from specplan.core.profile import Profile, load_profile
from specplan.core.yamlio import file_sha256
from specplan.planner import explain as explain_result
from specplan.planner.options import runtime_options


def add_parser(commands) -> None:
    parser = commands.add_parser("plan", help="solve for the fastest configuration from a profile")
    parser.add_argument("profile", help="profile.yaml written by `specplan profile`")
    parser.add_argument("-o", "--output", default=None, help="plan path (default: plan.yaml beside the profile)")
    parser.add_argument("--max-budget", type=int, default=64, help="largest tree budget (nodes) to consider")
    parser.add_argument("--max-depth", type=int, default=8, help="largest draft depth / gamma to consider")
    parser.add_argument("--temperature", type=float, default=0.0, help="decoding temperature the plan is for")
    parser.add_argument("--explain", action="store_true", help="print every candidate's cost terms")
    parser.add_argument("--stages", type=int, default=None, metavar="S",
                        help="take the best configuration with exactly S stages (e.g. 2: drafter -> middle model -> "
                             "target) instead of the overall best; its own prediction is written")
    parser.add_argument("--sku", default=None, metavar="NAME",
                        help="plan for a SKU of planner/data/skus.yaml (h100-sxm, ...) or `all`: measured acceptance, "
                             "roofline latency; writes a plan marked as modelled (every shape and hierarchy searched)")
    parser.add_argument("--efficiency", type=float, default=None, metavar="E",
                        help="with --sku: fraction of peak bandwidth and compute the roofline assumes (default 1)")
    parser.add_argument("--fit-efficiency", action="store_true",
                        help="with --sku: fit the roofline's efficiency to PROFILE's measured curves (its own SKU)")
    parser.add_argument("--skus", default=None, metavar="FILE", help="SKU table (default: planner/data/skus.yaml)")
    parser.set_defaults(handler="plan")



def solve_and_write(profile: Profile, profile_path: Path, plan_path: Path, *, max_budget: int, max_depth: int,
                     temperature: float, explain: bool, stages: int | None = None) -> Plan:
    options = runtime_options(max_budget, max_depth, temperature)
    relative = os.path.relpath(profile_path.resolve(), plan_path.resolve().parent)
    solution = solve_detailed(profile, options, stages=stages, profile_path=relative,
                              profile_sha256=file_sha256(profile_path))
    plan, result = solution.plan, solution.result
    save_plan(plan, plan_path)
    predicted = plan.predicted
    print(f"specplan: wrote {plan_path}: {plan.summary()}; predicted {predicted.tokens_per_s:.1f} tok/s, "
          f"{predicted.speedup:.2f}x over plain decoding")
    if stages is not None and plan.stages != result.plan.stages:
        print(f"specplan: (the overall best is {result.plan.summary()}, predicted "
              f"{result.plan.predicted.tokens_per_s:.1f} tok/s)")
    if explain:
        print(explain_result(result))
    return plan



def command(args) -> int:
    if getattr(args, "sku", None) or getattr(args, "efficiency", None) is not None or getattr(args, "fit_efficiency", False):
        from specplan.cli.plan_sku import command_plan_sku

        return command_plan_sku(args)
    runtime_options(args.max_budget, args.max_depth, args.temperature)  # bounds first: one line, no work
    profile = load_profile(args.profile)  # first: a plan given as the profile is named as such
    output = Path(args.output) if args.output else Path(args.profile).with_name("plan.yaml")
    check_output_file(output, kind="plan", inputs=[args.profile])
    solve_and_write(profile, Path(args.profile), output, max_budget=args.max_budget, max_depth=args.max_depth,
                     temperature=args.temperature, explain=args.explain, stages=args.stages)
    return 0

