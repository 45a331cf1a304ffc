"""A fresh lookup match's first chain (runtime/fallback.py ``first_chain``, docs/planner-math.md section
12.5), replayed over the target's greedy answers: which first chain a plan's lookup should draft.

A lookup plan at temperature 0 is deterministic given the target's answer: each round's draft, accepted
length and verify width follow, and with a T(n) curve so does the time (measurements/replay_lookup.py
``replay``, which plays the rounds here).
Here the rounds' chain lengths are the runtime's own ``ChainGrowth`` (a fresh match drafts ``first``
tokens, a first chain accepted whole goes on at the plan's gamma), for each first chain asked for and
for none (the plan's gamma from the start). The answers are a bench report's ``plain-runtime`` rows (the
target's greedy decoding on the same backend); the guard is left out (it acts on measured seconds).

    .venv/bin/python measurements/first_chain.py profiles/transfer-qwen/plan-humaneval/plan.yaml \\
        --report spec-bench=profiles/transfer-qwen-xeon/on-spec-bench --report humaneval=DIR \\
        [--curve PROFILE] [--first 7,11,15,23,31] [--gate]

``--gate``: one more column, the runtime's first chain with its match gate (runtime/match_gate.py), whose
records are carried from prompt to prompt as one engine carries them.
``--curve``: a profile whose target T(n) costs the rounds (default: the plan's own profile). Prints, per
workload, the replayed rate over plain decoding's (T(1) a token) pooled over prompts, and the lowest
prompt's; last, the plan's gamma drafting only what each round accepts (a bound no drafter passes).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specplan.core.quiet import quiet_libraries

quiet_libraries(verbose=False)  # before torch and transformers are imported

from specplan.api import Runner  # noqa: E402
from specplan.core.drafter_spec import parse_drafter_spec  # noqa: E402
from specplan.core.profile import load_profile  # noqa: E402
from specplan.core.workloads import workload_split  # noqa: E402
from specplan.models.chat import encode_prompt  # noqa: E402
from specplan.runtime.build import build_drafter, target_verify_ms  # noqa: E402
from specplan.runtime.fallback import ChainGrowth, first_chain  # noqa: E402
from specplan.runtime.match_gate import MatchGate  # noqa: E402
from replay_lookup import read_report, replay  # noqa: E402  (measurements/replay_lookup.py: the rounds over an answer)


def greedy_answers(runner, workload: str, report_dir: Path) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, greedy answer) of a bench report's ``plain-runtime`` rows on ``workload``'s evaluation split."""
    report = read_report(report_dir)
    prompts = {prompt.prompt_id: prompt for prompt in workload_split(workload, "evaluation")}
    rows = [row for row in report["rows"] if row["method"] == "plain-runtime"]
    decode = lambda ids: json.loads(ids) if isinstance(ids, str) else ids  # noqa: E731
    return [(encode_prompt(runner.target.tokenizer, prompts[row["prompt_id"]].text), decode(row["token_ids"]))
            for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("--report", action="append", required=True, help="WORKLOAD=DIR: a bench report with plain-runtime rows")
    parser.add_argument("--curve", type=Path, help="a profile whose target T(n) costs the rounds")
    parser.add_argument("--first", default="7,11,15,23,31", help="first chains to replay, comma-separated")
    parser.add_argument("--gate", action="store_true", help="also the runtime's first chain with its match gate")
    args = parser.parse_args()
    runner = Runner.open(args.plan).plan_runner
    (stage,) = runner.plan.stages
    entry = runner.profile.retrieval_entry(stage.drafter)
    drafter = build_drafter(parse_drafter_spec(entry.source), runner.target, runner.device).drafter
    verify_ms = target_verify_ms(load_profile(args.curve) if args.curve else runner.profile)  # as the runtime reads T
    round_ms = lambda drafted: verify_ms(drafted + 1) + entry.ms_per_call  # noqa: E731
    gamma = stage.shape.gamma
    firsts = [gamma] + [int(value) for value in args.first.split(",") if int(value) < gamma]
    print(f"plan {runner.plan.summary()}; T(n) of {args.curve or 'the plan profile'}: T(1) {verify_ms(1):.1f} ms, "
          f"T(64) {verify_ms(64):.1f} ms; first_chain gives {first_chain(gamma, verify_ms)}")
    columns = [(first, False, False) for first in firsts] + [(gamma, True, False)]
    if args.gate:
        columns.append((first_chain(gamma, verify_ms), False, True))
    print("| workload | prompts | " + " | ".join(f"first {first}" for first in firsts) + " | accepted only |"
          + (" first chain, gated |" if args.gate else ""))
    print("|---|---:|" + "---|" * len(columns))
    for item in args.report:
        name, folder = item.split("=", 1)
        answers = greedy_answers(runner, name, Path(folder))
        cells = []
        for first, oracle, gated in columns:
            growth = ChainGrowth(gamma, verify_ms=verify_ms, first=first)
            drafter.gate = MatchGate(gamma, verify_ms, longest=growth.reach) if gated else None  # as the engine builds it
            spent = [replay(drafter, growth, prompt, answer, len(answer), round_ms, oracle)[0]
                     for prompt, answer in answers]
            plain = [verify_ms(1) * len(answer) for _, answer in answers]
            lowest = min(p / s for p, s in zip(plain, spent))
            declined = f", {drafter.gate.declined} declined" if gated else ""
            cells.append(f"{sum(plain) / sum(spent):.3f}x (lowest {lowest:.2f}{declined})")
        print(f"| {name} | {len(answers)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
