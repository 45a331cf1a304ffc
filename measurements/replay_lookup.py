"""Where a lookup plan's prediction goes wrong: the cost model, or the prompts?

A plan whose only stage is a retrieval drafter's chain verified by the target (``ngram-12-12 ->
target (sequence gamma 63)``) is deterministic at temperature 0: given the target's answer to a
prompt, every round's draft, its accepted length and its verify width follow, and with the
profile's T(n) so does the time. This replays such a plan over the target's own answers, as the
runtime plays it (a round with r tokens left drafts at most min(gamma, r - 1); the drafter sees
prompt + committed answer), costing each round T(drafted + 1) plus the drafter's profiled call:

- on the **calibration** answers (the prompts the profile measured acceptance on; the target's
  greedy answers are generated here, a few minutes): replayed against the plan's prediction
  shows what the cost model's i.i.d.-round, finite-answer form (docs/planner-math.md section 1)
  loses against the rounds themselves;
- on the **evaluation** answers (the plan's rows of a bench report, ``--report``): replayed
  against the bench's measured decode rate shows what the runtime's time differs from T(n) by;
  replayed against the calibration replay shows how much the two prompt sets differ.

Each rate has its 95% interval over prompts (bootstrap, bench/quality.py ``prompt_spread``), and
the bound a drafter of these proposals could reach if it knew each round's accepted length (it
drafts exactly the accepted tokens: the cost of the rejected ones removed).

    .venv/bin/python measurements/replay_lookup.py profiles/cpu-qwen-llamacpp-edit-long/plan-h128.yaml \
        --report profiles/cpu-qwen-llamacpp-edit-long/bench-h128-40x128 [--answers /tmp/calibration-answers.json]

``--answers FILE``: the calibration answers are read from FILE when it exists and written to it
otherwise (the generation is the slow part).

``--alternatives ngram:12:12,ngram:12:6 --gammas 1,3,7,11``: instead, every drafter x chain length over the
report's evaluation answers (the plan's own drafter need not be among them; the report may be of any plan
of this target at temperature 0, plain decoding included, whose answers are the target's greedy ones):
replayed rate over plain decoding's (T(1) a token), fixed chains, and the bound that drafts only what each
round accepts in brackets.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
from pathlib import Path

from specplan.core.quiet import quiet_libraries

quiet_libraries(verbose=False)  # before torch and transformers are imported

from specplan.api import Runner  # noqa: E402
from specplan.bench.quality import prompt_spread  # noqa: E402
from specplan.core.drafter_spec import parse_drafter_spec  # noqa: E402
from specplan.core.workloads import workload_split  # noqa: E402
from specplan.models.chat import encode_prompt  # noqa: E402
from specplan.planner.latency import interpolate, nearest_curve  # noqa: E402
from specplan.runtime.build import build_drafter, target_verify_ms  # noqa: E402
from specplan.runtime.drafters.base import SamplingConfig  # noqa: E402
from specplan.runtime.fallback import ChainGrowth  # noqa: E402

GREEDY = SamplingConfig(temperature=0.0)


def replay(drafter, chain: int | ChainGrowth, prompt: list[int], answer: list[int], max_new_tokens: int,
           round_ms, oracle: bool = False) -> tuple[float, int]:
    """(milliseconds, rounds) of the chain rounds over ``answer``, each drafting ``chain.gamma`` tokens at most
    (the runtime's ChainGrowth; a number: that gamma every round); ``oracle``: draft only the tokens accepted."""
    if isinstance(chain, int):
        chain = ChainGrowth(chain, longest=chain)  # neither grows nor starts short
    drafter.reset()
    chain.start()
    position, milliseconds, rounds = 0, 0.0, 0
    while position < len(answer):
        budget = min(chain.gamma, max_new_tokens - position - 1)
        draft = drafter.propose(prompt + answer[:position], budget, GREEDY, None).tokens if budget > 0 else ()
        accepted = 0
        while accepted < len(draft) and position + accepted < len(answer) and draft[accepted] == answer[position + accepted]:
            accepted += 1
        milliseconds += round_ms(accepted if oracle else len(draft))
        chain.record(len(draft), accepted + 1)
        rounds += 1
        position += accepted + 1
    return milliseconds, rounds


def calibration_answers(runner, workload: str, limit: int, max_new_tokens: int, path: Path | None) -> list[dict]:
    """The target's greedy answers to the calibration prompts (read from / written to ``path``)."""
    if path is not None and path.exists():
        return json.loads(path.read_text())
    answers = []
    for prompt in workload_split(workload, "calibration")[:limit]:
        ids = encode_prompt(runner.target.tokenizer, prompt.text)
        result = runner.generate(ids, max_new_tokens, GREEDY, plain=True)
        answers.append({"category": prompt.category, "prompt": ids, "answer": list(result.token_ids)})
    if path is not None:
        path.write_text(json.dumps(answers))
    return answers


def evaluation_answers(runner, report: dict) -> tuple[list[dict], str]:
    """The plan's own answers in a bench report, and its measured decode rate over them (with the
    interval over prompts, as the bench gives it)."""
    prompts = {p.prompt_id: p for p in workload_split(_workload(report), "evaluation")}
    rows = [row for row in report["rows"] if row["method"] == "plan"]
    answers = [{"category": row["category"], "prompt": encode_prompt(runner.target.tokenizer, prompts[row["prompt_id"]].text),
                "answer": row["token_ids"]} for row in rows]
    tokens = [row["new_tokens"] for row in rows]
    seconds = [row["new_tokens"] / row["decode_tokens_per_s"] for row in rows]
    low, high = prompt_spread(tokens, seconds) or (float("nan"),) * 2
    return answers, f"{sum(tokens) / sum(seconds):.1f} (95% interval over prompts {low:.1f}-{high:.1f})"


def read_report(path: Path) -> dict:
    """A bench report: its folder (report.json, or report.json.gz as stored) or the file itself."""
    if path.is_dir():
        path = path / "report.json" if (path / "report.json").exists() else path / "report.json.gz"
    text = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    return json.loads(text)


def _workload(report: dict) -> str:
    return report["meta"]["prompt_source"].split()[0].lower()  # "Spec-Bench evaluation split": spec-bench


def rates(answers: list[dict], play) -> dict:
    """Per category and over all: replayed tokens/s, its prompt-spread interval, rounds."""
    spent = [play(a["prompt"], a["answer"]) for a in answers]
    groups = collections.defaultdict(list)
    for answer, (milliseconds, rounds) in zip(answers, spent):
        for key in ("all", answer["category"]):
            groups[key].append((len(answer["answer"]), milliseconds / 1000.0, rounds))
    table = {}
    for key, items in groups.items():
        tokens, seconds, rounds = (sum(column) for column in zip(*items))
        low, high = prompt_spread([i[0] for i in items], [i[1] for i in items]) or (float("nan"),) * 2
        table[key] = {"prompts": len(items), "tokens_per_s": tokens / seconds, "low": low, "high": high,
                      "accepted": tokens / rounds}
    return table


def alternatives(runner, report: dict, specs: list[str], gammas: list[int]) -> None:
    """Each drafter spec x fixed chain length replayed over the report's evaluation answers."""
    profile = runner.profile
    verify_ms = target_verify_ms(profile)  # T(n) read as the runtime reads it (steps between profiled widths)
    plain_ms = verify_ms(1)
    evaluation, measured = evaluation_answers(runner, report)
    max_new = int(report["meta"]["max_new_tokens"])
    print(f"{len(evaluation)} evaluation answers of {_workload(report)}; T(1) {plain_ms:.2f} ms; the report's plan "
          f"measured {measured} decode tok/s. Replayed rate over plain decoding's (accepted-only bound):")
    print("| drafter | " + " | ".join(f"chain {gamma}" for gamma in gammas) + " |")
    print("|---|" + "---:|" * len(gammas))
    for spec in specs:
        drafter = build_drafter(parse_drafter_spec(spec), runner.target, runner.device).drafter
        call_ms = max((entry.ms_per_call for entry in profile.retrieval if entry.source == spec), default=0.0)
        cells = []
        for gamma in gammas:
            speed = []
            for oracle in (False, True):
                table = rates(evaluation, lambda p, a: replay(drafter, gamma, p, a, max_new,
                                                              lambda drafted: verify_ms(drafted + 1) + call_ms,
                                                              oracle))
                speed.append(table["all"]["tokens_per_s"] * plain_ms / 1000.0)
            cells.append(f"{speed[0]:.3f} ({speed[1]:.3f})")
        print(f"| `{spec}` | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("--report", required=True, help="a bench report folder (or its report.json) of this plan")
    parser.add_argument("--answers", type=Path, help="cache of the calibration answers (JSON)")
    parser.add_argument("--alternatives", help="drafter specs to replay instead of the plan (comma-separated)")
    parser.add_argument("--gammas", default="1,3,7,11,15", help="chain lengths for --alternatives")
    args = parser.parse_args()
    report = read_report(Path(args.report))
    runner = Runner.open(args.plan).plan_runner
    if args.alternatives:
        alternatives(runner, report, args.alternatives.split(","), [int(g) for g in args.gammas.split(",")])
        return
    plan, profile = runner.plan, runner.profile
    (stage,) = plan.stages
    spec = parse_drafter_spec(profile.retrieval_entry(stage.drafter).source)
    drafter = build_drafter(spec, runner.target, runner.device).drafter
    call_ms = profile.retrieval_entry(stage.drafter).ms_per_call
    curve = nearest_curve(profile.target, None)
    round_ms = lambda drafted: interpolate(curve, drafted + 1).ms + call_ms  # noqa: E731
    max_new = int(report["meta"]["max_new_tokens"])
    calibration = calibration_answers(runner, _workload(report), profile.calibration.get("count", 40),
                                      max_new, args.answers)
    evaluation, measured = evaluation_answers(runner, report)
    print(f"plan {plan.summary()}: predicted {plan.predicted.tokens_per_s:.1f} tok/s; measured {measured} "
          f"decode tok/s on the report's {len(evaluation)} prompts")
    print("| answers | drafting | category | prompts | replayed tok/s | 95% interval | accepted/round |")
    print("|---|---|---|---:|---:|---|---:|")
    for name, answers in (("calibration", calibration), ("evaluation", evaluation)):
        for oracle in (False, True):
            table = rates(answers, lambda p, a: replay(drafter, stage.shape.gamma, p, a, max_new, round_ms, oracle))
            for key, row in sorted(table.items(), key=lambda item: item[0] != "all"):
                print(f"| {name} | {'accepted only' if oracle else 'the plan'} | {key} | {row['prompts']} | "
                      f"{row['tokens_per_s']:.1f} | {row['low']:.1f}-{row['high']:.1f} | {row['accepted']:.2f} |")


if __name__ == "__main__":
    main()
