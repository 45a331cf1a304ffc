"""What idle slots cost a request on torch: one request decoded through a shared batch of 1 slot and of
``--slots`` slots (runtime/torch_shared.py), the others holding no request, as ``specplan serve --parallel N``
runs one request at a time of light traffic.

Each Spec-Bench evaluation prompt is decoded greedily by the plan's engine (its drafter, guard and chain
growth; ``--plain``: plain decoding) once per batch size, the sizes alternating in order prompt by prompt;
prints the decode rate of each (the generated tokens after the first over the time after the prefill,
pooled) and the ratio, 1.0 when an idle slot costs nothing.

    .venv/bin/python measurements/idle_slots.py profiles/cpu-batched/plan-batched.yaml [--slots 4] [--limit 8] \\
        [--max-new-tokens 64] [--plain]
"""

from __future__ import annotations

import argparse

from specplan.core.quiet import quiet_libraries

quiet_libraries(verbose=False)  # before torch and transformers are imported

from specplan.api import Runner  # noqa: E402
from specplan.core.workloads import workload_split  # noqa: E402
from specplan.models.chat import encode_prompt  # noqa: E402
from specplan.runtime.build import build_engine  # noqa: E402
from specplan.runtime.drafters.base import SamplingConfig  # noqa: E402
from specplan.runtime.engine import SpeculativeEngine  # noqa: E402
from specplan.runtime.torch_shared import SharedNetworks  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--plain", action="store_true", help="plain decoding instead of the plan's engine")
    args = parser.parse_args()
    runner = Runner.open(args.plan).plan_runner
    model, device = runner.target.model, runner.device
    engines = {}
    for slots in (1, args.slots):
        session = SharedNetworks(slots).session(model)  # one request in a shared batch of `slots` rows
        if args.plain:
            engines[slots] = SpeculativeEngine(session, device, runner.engine.eos_ids)
        else:
            engines[slots] = build_engine(runner.plan, runner.profile, runner.target, device, session=session)
    prompts = [encode_prompt(runner.target.tokenizer, prompt.text) for prompt in workload_split("spec-bench", "evaluation")]
    tokens, seconds = {slots: 0 for slots in engines}, {slots: 0.0 for slots in engines}
    engines[1].generate(prompts[0], 8, SamplingConfig())  # warm-up
    engines[args.slots].generate(prompts[0], 8, SamplingConfig())
    for number, prompt in enumerate(prompts[: args.limit]):
        for slots in (list(engines) if number % 2 == 0 else list(engines)[::-1]):
            result = engines[slots].generate(prompt, args.max_new_tokens, SamplingConfig())
            tokens[slots] += len(result.token_ids) - result.first_tokens
            seconds[slots] += result.seconds - result.first_seconds
    rates = {slots: tokens[slots] / seconds[slots] for slots in engines}
    what = "plain decoding" if args.plain else runner.plan.summary()
    print(f"{what}; {args.limit} Spec-Bench prompts x {args.max_new_tokens} tokens, one request at a time")
    for slots, rate in rates.items():
        print(f"  shared batch of {slots} slot(s): {rate:.1f} decode tok/s")
    print(f"  {args.slots} slots over 1: {rates[args.slots] / rates[1]:.3f}x")


if __name__ == "__main__":
    main()
