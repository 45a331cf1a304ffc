"""Plans under load, measured: whole-batch tokens/s at every batch size of the plan's engines decoding
the prompts together (playing the schedule's row by load, and the plan every round), of engines of plain
decoding and of transformers ``generate`` with left padding, each beside the schedule's prediction; then
the measured crossover batch against the predicted one.

    .venv/bin/python measurements/batched.py PLAN [--batch 1,2,4,8] [--max-new-tokens 64]
        [--repeats 3] [--prompts FILE] [--runtime eager] [--force] [--json OUT]

The prompts are the first Spec-Bench evaluation prompts (stratified by category), cycled when a
batch is larger than --limit. Run it on a quiet machine: every method at every batch is timed
--repeats times, interleaved. The plan needs a schedule (`specplan profile --batch-sizes ...`,
then `specplan plan`) for predictions; without one only measurements are printed.
"""

from __future__ import annotations

import argparse
import json
import sys

from specplan.core.quiet import quiet_libraries

quiet_libraries(verbose=False)  # before torch imports: no library chatter

from specplan.api import Runner  # noqa: E402
from specplan.bench.batched import measure_batches, report  # noqa: E402
from specplan.cli.batch_option import parse_batch_sizes  # noqa: E402
from specplan.core.errors import SpecplanError  # noqa: E402
from specplan.core.prompts import read_prompts, spec_bench_split, stratified  # noqa: E402
from specplan.core.runtime_modes import runtime_from_environment  # noqa: E402


def arguments(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("--batch", default="1,2,4,8", help="batch sizes, e.g. 1,2,4,8")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=16, help="distinct prompts (cycled in larger batches)")
    parser.add_argument("--prompts", default=None, help="JSONL with `prompt` or `turns` (default: Spec-Bench)")
    parser.add_argument("--runtime", default=None, help="eager (default: SPECPLAN_RUNTIME, else eager)")
    parser.add_argument("--force", action="store_true", help="run even if the profile's device or model differ")
    parser.add_argument("--json", default=None, help="write the points and crossovers here")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = arguments(argv)
    try:
        batches = parse_batch_sizes(args.batch, "--batch")
        if args.max_new_tokens < 1 or args.repeats < 1 or args.limit < 1:
            raise SpecplanError("--max-new-tokens, --repeats and --limit must be at least 1")
        prompts = read_prompts(args.prompts) if args.prompts else stratified(spec_bench_split("evaluation"), args.limit)
        runner = Runner.open(args.plan, runtime=runtime_from_environment(args.runtime), force=args.force)
        plan_runner = runner.plan_runner
        encoded = [plan_runner.check_prompt(prompt, args.max_new_tokens) for prompt in prompts[: args.limit]]
    except SpecplanError as error:
        print(f"batched: error: {error}", file=sys.stderr)
        return 2
    points = measure_batches(plan_runner, encoded, batches, args.max_new_tokens, args.repeats,
                             lambda line: print(line, file=sys.stderr, flush=True))
    meta = {"plan": args.plan, "device": str(plan_runner.device), "max_new_tokens": args.max_new_tokens,
            "repeats": args.repeats}
    text, document = report(points, runner.plan, meta)
    print(text)
    if args.json:
        from specplan.core.files import write_text_atomic

        write_text_atomic(args.json, json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
