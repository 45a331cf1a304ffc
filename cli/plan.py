"""``specplan plan PROFILE``: solve for the fastest configuration and write plan.yaml
(``--sku``: plans for a named device, :mod:`specplan.cli.plan_sku`)."""

from __future__ import annotations

from pathlib import Path

from specplan.api import check_batch_sizes, solve_plan_file
from specplan.cli.batch_option import add_batch_sizes_option, parse_batch_sizes
from specplan.core.outputs import check_output_file
from specplan.core.plan import Plan, floor_phrase, prompt_spread_of, save_plan
from specplan.core.profile import Profile, load_profile
from specplan.planner import explain as explain_result
from specplan.planner.explain_schedule import schedule_table
from specplan.planner.prediction import prediction_line
from specplan.planner.options import runtime_options
from specplan.cli.options import TEMPERATURE, integer, number
from specplan.core.limits import MAX_DEPTH, MAX_TREE_BUDGET
from specplan.planner.options import RUNTIME_MAX_STAGES
from specplan.planner.horizon import MAX_HORIZON, calibration_horizon


def add_parser(commands) -> None:
    parser = commands.add_parser("plan", help="solve for the fastest configuration from a profile")
    parser.add_argument("profile", help="profile.yaml written by `specplan profile`")
    parser.add_argument("-o", "--output", default=None, help="plan path (default: plan.yaml beside the profile)")
    parser.add_argument("--max-budget", type=integer(1, MAX_TREE_BUDGET), default=64, help="largest tree budget (nodes) to consider")
    parser.add_argument("--max-depth", type=integer(1, MAX_DEPTH), default=None,
                        help="largest draft depth / gamma to consider (default: trees 8 deep, chains up to the "
                             "length the profile measured, 8, or 16 for a lookup that drafts only on a match)")
    parser.add_argument("--temperature", type=TEMPERATURE, default=0.0, help="decoding temperature the plan is for")
    parser.add_argument("--horizon", type=integer(1, MAX_HORIZON), default=None, metavar="TOKENS",
                        help="cost chains over answers of this many tokens, as the runtime caps a draft at the budget's "
                             "end (default: the calibration's answer length, the answers acceptance was counted on; "
                             "set it to your usual --max-new-tokens)")
    parser.add_argument("--explain", action="store_true", help="print every candidate's cost terms")
    parser.add_argument("--stages", type=integer(0, RUNTIME_MAX_STAGES), default=None, metavar="S",
                        help="take the best configuration with exactly S stages (e.g. 2: drafter -> middle model -> "
                             "target) instead of the overall best; its own prediction is written")
    parser.add_argument("--sku", default=None, metavar="NAME",
                        help="plan for a SKU of planner/data/skus.yaml (h100-sxm, ...) or `all`: measured acceptance, "
                             "roofline latency; writes a plan marked as modelled (every shape and hierarchy searched)")
    parser.add_argument("--efficiency", type=number(0.0, 1.0, above_low=True), default=None, metavar="E",
                        help="with --sku: fraction of peak bandwidth and compute the roofline assumes (default 1)")
    parser.add_argument("--fit-efficiency", action="store_true",
                        help="with --sku: fit the roofline's efficiency to PROFILE's measured curves (its own SKU)")
    parser.add_argument("--skus", default=None, metavar="FILE", help="SKU table (default: planner/data/skus.yaml)")
    add_batch_sizes_option(parser, "the batch sizes of the schedule (plan.yaml `schedule`): a subset of those PROFILE "
                                   "measured (default: all), or with --sku those modelled (default 1,2,4,...,256 up to "
                                   "the SKU's memory)")
    parser.add_argument("--adaptive", action="store_true",
                        help="write a closed-loop plan: the runtime re-solves among the best configurations from each "
                             "request's live acceptance (plan.yaml `adaptive`, docs/guide.md)")
    parser.add_argument("--batched", action="store_true",
                        help="solve only among what `run --batch` / `bench --batch` execute: plain decoding or one "
                             "sequence stage drafted by ngram:N or a drafter model")
    parser.set_defaults(handler="plan")



def solve_and_write(profile: Profile, profile_path: Path, plan_path: Path, *, max_budget: int, max_depth: int | None,
                     temperature: float, explain: bool, stages: int | None = None,
                     batches: tuple[int, ...] | None = None, adaptive: bool = False, batched: bool = False,
                     horizon: int | None = None) -> Plan:
    """Solve (:func:`specplan.api.solve_plan_file`), write ``plan_path`` and print what was chosen; chains are
    costed over ``horizon`` tokens per answer, by default the calibration's answer length."""
    if horizon is None:
        horizon = calibration_horizon(profile)
    solution = solve_plan_file(profile, profile_path, plan_path, runtime_options(max_budget, max_depth, temperature, horizon, lookup_at_tie=True),
                               stages=stages, batches=batches, adaptive=adaptive, batched=batched)
    plan, result, scheduled = solution.plan, solution.result, solution.schedule
    save_plan(plan, plan_path)
    predicted = plan.predicted
    print(f"specplan: wrote {plan_path}: {plan.summary()}; predicted {predicted.tokens_per_s:.1f} tok/s, "
          f"{floor_phrase(plan)}")
    if isinstance(plan.solver, dict) and plan.solver.get("plain_reason"):
        print(f"specplan: {plan.solver['plain_reason']}")  # the one-line reason a plan is plain decoding
    if isinstance(plan.solver, dict) and plan.solver.get("lookup_at_tie"):
        print(f"specplan: {plan.solver['lookup_at_tie']}")  # why a lookup at a tie is kept over plain decoding
    line = prediction_line(plan, profile)
    if line is not None:  # a client's prediction: its planned lengths against the fixed rule's (section 12.6)
        print(line + "; `serve` plays the fixed rule unless given `--prediction-lengths planned`")
    spread = prompt_spread_of(plan)
    if spread is not None and spread[0] < 1.0:
        print(f"specplan: on the least favourable draws of the calibration prompts the plan is {spread[0]:.2f}x the "
              "floor; at run time a guard plays plain decoding in each request where the plan loses (run --no-fallback "
              "turns it off)")
    if plan.adaptive is not None:
        print(f"specplan: adaptive: {len(plan.adaptive.candidates)} candidate configurations, re-solved from each "
              f"request's acceptance every {plan.adaptive.every} target rounds")
    if stages is not None and plan.stages != result.plan.stages:
        print(f"specplan: (the overall best is {result.plan.summary()}, predicted "
              f"{result.plan.predicted.tokens_per_s:.1f} tok/s)")
    if explain:
        print(explain_result(result))
    if scheduled is not None:
        print(schedule_table(scheduled.schedule) if explain else _crossover_line(scheduled.schedule))
    return plan


def _crossover_line(schedule) -> str:
    crossover = schedule.crossover_batch
    where = f"from batch {crossover}" if crossover is not None else f"at no batch up to {schedule.rows[-1].batch}"
    return (f"specplan: schedule for batch {', '.join(str(row.batch) for row in schedule.rows)}: "
            f"plain decoding wins {where} (plan --explain prints the table)")



def command(args) -> int:
    if getattr(args, "sku", None) or getattr(args, "efficiency", None) is not None or getattr(args, "fit_efficiency", False):
        from specplan.cli.plan_sku import command_plan_sku

        return command_plan_sku(args)
    runtime_options(args.max_budget, args.max_depth, args.temperature)  # bounds first: one line, no work
    profile = load_profile(args.profile)  # first: a plan given as the profile is named as such
    output = Path(args.output) if args.output else Path(args.profile).with_name("plan.yaml")
    check_output_file(output, kind="plan", inputs=[args.profile])
    batches = parse_batch_sizes(args.batch_sizes)
    if batches is not None:
        check_batch_sizes(profile, batches)  # before any solving: one line, no work
    solve_and_write(profile, Path(args.profile), output, max_budget=args.max_budget, max_depth=args.max_depth,
                     temperature=args.temperature, explain=args.explain, stages=args.stages, batches=batches,
                    adaptive=args.adaptive, batched=args.batched, horizon=args.horizon)
    return 0

