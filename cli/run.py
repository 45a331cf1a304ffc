"""``specplan run PLAN``: execute a plan losslessly on a prompt or a JSONL of prompts."""

from __future__ import annotations

import json

from specplan.api import Runner
from specplan.cli.options import NEW_TOKENS, SEED, TEMPERATURE, add_runtime_option, chosen_runtime, integer, number
from specplan.core.errors import SpecplanError
from specplan.core.prompts import Prompt, read_prompts

DEMO_PROMPT = "Explain in a few sentences why the sky is blue, then repeat the key reason in one line."


def add_parser(commands) -> None:
    parser = commands.add_parser("run", help="execute plan.yaml losslessly")
    parser.add_argument("plan", help="plan.yaml written by `specplan plan` or `specplan profile`")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--prompt", help="prompt text (default: a built-in demo prompt)")
    source.add_argument("--prompts", help="JSONL with `prompt` or `turns` per line")
    parser.add_argument("--max-new-tokens", type=NEW_TOKENS, default=128)
    parser.add_argument("--temperature", type=TEMPERATURE, default=None, help="default: the plan's temperature")
    parser.add_argument("--top-p", type=number(0.0, 1.0, above_low=True), default=1.0)
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON object per prompt on stdout")
    parser.add_argument("--stream", action="store_true", help="print text as it is committed")
    parser.add_argument("--compare-plain", action="store_true", help="also decode plainly and print the speedup")
    parser.add_argument("--force", action="store_true", help="run even if the profile's device or model differ")
    parser.add_argument("--no-fallback", action="store_true",
                        help="play the plan every round, even where plain decoding is measured cheaper for this "
                             "request (default: fall back to plain decoding while speculation does not pay)")
    parser.add_argument("--threads", type=integer(0, 1024), default=0,
                        help="a plan on the llama.cpp backend: llama.cpp's CPU threads (default: every core)")
    parser.add_argument("--batch", type=integer(1, 4096), default=None, metavar="B",
                        help="decode the prompts B at a time together, each on an engine of the schedule's row for B "
                             "(the plan's without a schedule), their forwards batched")
    add_runtime_option(parser, from_plan=True)
    parser.set_defaults(handler="run")



def _run_prompts(args) -> list[Prompt]:
    if args.prompts:
        return read_prompts(args.prompts)
    text = DEMO_PROMPT if args.prompt is None else args.prompt
    if not text.strip():
        raise SpecplanError("the prompt is empty; pass --prompt TEXT with some text or --prompts FILE")
    return [Prompt("prompt", "prompt", text)]



def command(args) -> int:
    prompts = _run_prompts(args)
    if args.batch is not None:
        from specplan.cli.run_batched import run_batched

        return run_batched(args, prompts)
    runner = Runner.open(args.plan, runtime=chosen_runtime(args), force=args.force, threads=args.threads,
                         fallback=not args.no_fallback)
    for prompt in prompts:  # every prompt fits the context before the first one decodes
        runner.plan_runner.check_prompt(prompt, args.max_new_tokens)
    for prompt in prompts:
        result = runner.generate(prompt, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                 top_p=args.top_p, seed=args.seed, stream=args.stream and not args.json,
                                 compare_plain=args.compare_plain)
        if args.json:
            print(json.dumps({**result.as_record(), "plan": str(args.plan)}, ensure_ascii=False), flush=True)
        else:
            if not args.stream:
                print(result.text)
            print(runner.summary_line(result), flush=True)
    return 0

