"""``specplan bench PLAN``: argument checks, prompts, the run, the report."""

from __future__ import annotations

import sys
from pathlib import Path

from specplan.errors import SpecplanError
from specplan.prompts import read_prompts, spec_bench_split, stratified


def command_bench(args) -> int:
    from specplan.commands import load_plan_and_profile
    from specplan.runtime.bench import run_bench
    from specplan.runtime.runner import PlanRunner

    if args.limit < 1 or args.max_new_tokens < 1:
        raise SpecplanError("--limit and --max-new-tokens must be at least 1")
    unknown = [b for b in args.baselines.split(",") if b and b != "plain"]
    if unknown:
        raise SpecplanError(f"unknown baseline(s) {', '.join(unknown)}; this version measures: plain")
    plan, profile, profile_path = load_plan_and_profile(args.plan)
    prompts = read_prompts(args.prompts) if args.prompts else spec_bench_split("evaluation")
    prompts = stratified(prompts, args.limit)
    runner = PlanRunner.open(plan, profile, profile_path, force=args.force)
    report = run_bench(runner, prompts, args.max_new_tokens)
    print(report.markdown())
    if args.report:
        report.write(Path(args.report))
        print(f"specplan: wrote {args.report}/report.md and report.json", file=sys.stderr)
    return 0
