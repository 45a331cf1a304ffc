"""``specplan bench PLAN --batch 1,2,4,8``: whole-batch tokens/s per batch size of the plan's engines
decoding the prompts together (playing the schedule's row by load, and the plan every round), engines of
plain decoding and transformers ``generate`` with left padding, beside the schedule's prediction
(specplan.bench.batched; docs/guide.md, "Batched runs")."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from specplan.cli.batch_option import parse_batch_sizes
from specplan.cli.bench import bench_prompts
from specplan.cli.options import chosen_runtime
from specplan.core.contract import check_batchable, load_plan_and_profile
from specplan.core.errors import SpecplanError
from specplan.core.runtime_modes import EAGER
from specplan.core.outputs import check_output_folder
from specplan.core.prompts import stratified

REPEATS = 3  # timed runs per method and batch (the median is reported)


def bench_batched(args) -> int:
    batches = parse_batch_sizes(args.batch, "--batch")
    plan, profile, profile_path = load_plan_and_profile(args.plan)
    check_batchable(profile)
    prompts = stratified(bench_prompts(args)[0], args.limit)
    if args.report:
        check_output_folder(args.report, flag="--report")
    from specplan.bench.batched import measure_batches, report
    from specplan.core.files import write_text_atomic
    from specplan.models.load import quiet_transformers
    from specplan.runtime.runner import PlanRunner

    quiet_transformers()
    runner = PlanRunner.open(plan, profile, profile_path, force=args.force,
                             runtime=chosen_runtime(args) or EAGER)  # batched forwards run eagerly: no compiled build
    encoded = [runner.check_prompt(prompt, args.max_new_tokens) for prompt in prompts]
    if not encoded:
        raise SpecplanError("no prompts to measure; pass --prompts FILE with at least one prompt")
    context = None
    if args.at_profile_context:
        encoded, context = at_profile_context(encoded, profile)
    points = measure_batches(runner, encoded, batches, args.max_new_tokens, REPEATS,
                             lambda line: print(f"specplan: {line}", file=sys.stderr, flush=True),
                             stop_at_eos=context is None)  # at the profile's context: fixed-length decodes
    meta = {"plan": str(args.plan), "device": str(runner.device), "max_new_tokens": args.max_new_tokens,
            "repeats": REPEATS, "prompts": len(encoded), "prompt_tokens": context}
    text, document = report(points, plan, meta)
    if args.report:
        folder = Path(args.report)
        write_text_atomic(folder / "batched.md", text)
        write_text_atomic(folder / "batched.json", json.dumps(document, indent=2) + "\n")
        print(f"specplan: wrote {folder}/batched.md, batched.json", file=sys.stderr)
    print(text)
    return 0


def at_profile_context(encoded: list[list[int]], profile) -> tuple[list[list[int]], int]:
    """Every prompt made exactly as long as the target's first latency curve's context (the one
    the schedule is solved at): the prompts before it fill the rest, a longer prompt keeps its
    last tokens (:func:`specplan.profiler.batch_overhead.batch_prompts`, the profiler's own rule)."""
    from specplan.profiler.batch_overhead import batch_prompts, repeated_to

    context = profile.target.latency[0].context
    filler = repeated_to([token for ids in encoded for token in ids], context)
    return batch_prompts(filler, encoded, len(encoded)), context
