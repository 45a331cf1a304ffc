"""A user's own prompts: ``profile --prompts FILE`` calibrates on half of the file and predicts the plan
on the other half; ``bench --prompts FILE --held-out`` measures that half. The split, the re-costing
of a plan on held-out acceptance, and the one-line refusals."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from specplan.cli.main import main
from specplan.cli.profile import held_out_line
from specplan.core.contract import load_plan_and_profile
from specplan.core.prompts import MIN_HELD_OUT_FILE, Prompt, held_out_split
from specplan.planner.recheck import recost

ROOT = Path(__file__).resolve().parents[2]
EDIT_PLAN = ROOT / "profiles" / "cpu-smollm2-llamacpp-edit-quick" / "plan.yaml"
SPEC_BENCH_PLAN = ROOT / "profiles" / "transfer-smollm2" / "plan-specbench" / "plan.yaml"


def test_the_halves_are_disjoint_cover_the_file_and_every_category_of_two_or_more():
    rows = [Prompt(str(i), ["code", "chat", "math"][i % 3], f"prompt {i}") for i in range(31)]
    calibration, held_out = held_out_split(rows)
    assert {p.prompt_id for p in calibration} | {p.prompt_id for p in held_out} == {p.prompt_id for p in rows}
    assert not {p.prompt_id for p in calibration} & {p.prompt_id for p in held_out}
    assert abs(len(calibration) - len(held_out)) <= 3  # one per category at most
    assert {p.category for p in held_out} == {p.category for p in calibration} == {"code", "chat", "math"}
    assert held_out_split(rows) == (calibration, held_out)  # the same file always splits the same way


def test_a_small_file_is_all_calibration():
    rows = [Prompt(str(i), "prompt", "x") for i in range(MIN_HELD_OUT_FILE - 1)]
    assert held_out_split(rows) == (rows, [])


def test_a_plan_recosted_on_its_own_profile_is_its_prediction_and_on_worse_acceptance_slower():
    plan, profile, _ = load_plan_and_profile(str(EDIT_PLAN))
    assert plan.stages and recost(plan, profile) == pytest.approx(plan.predicted.ms_per_token, rel=0.02)
    _, chat, _ = load_plan_and_profile(str(SPEC_BENCH_PLAN))  # the same drafters, calibrated on chat
    held = replace(profile, acceptance=chat.acceptance, calibration={**profile.calibration, "count": 7})
    held_ms = recost(plan, held)
    assert held_ms > plan.predicted.ms_per_token  # an edit plan meets chat: its lookups hit less
    line = held_out_line(plan, profile, held, "mine.jsonl", Path("plan.yaml"))
    assert line.startswith("specplan: 7 prompts of mine.jsonl held out of calibration: the plan predicts "
                           f"{1000.0 / held_ms:.1f} tok/s on them")
    assert "`specplan bench plan.yaml --prompts mine.jsonl --held-out`" in line


def test_a_plain_plan_is_the_same_on_any_prompts():
    plan, profile, _ = load_plan_and_profile(str(EDIT_PLAN))
    plain = replace(plan, stages=())
    assert recost(plain, profile) is None
    assert "plain decoding, the same on them" in held_out_line(plain, profile, profile, "f.jsonl", Path("p.yaml"))


@pytest.mark.parametrize("argv, fragment", [
    (["bench", str(EDIT_PLAN), "--held-out"], "add --prompts or drop it"),
    (["bench", str(EDIT_PLAN), "--prompts", "{small}", "--held-out"], "too few to hold any out"),
    (["profile", "--no-held-out", "--backend", "llama.cpp", "--no-plan"], "--no-held-out goes with --prompts"),
])
def test_held_out_options_are_refused_in_one_line(argv, fragment, tmp_path, capsys):
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps({"prompt": f"p{i}"}) + "\n" for i in range(2)))
    argv = [arg.replace("{small}", str(small)) for arg in argv]
    if argv[0] == "profile":
        argv += ["-o", str(tmp_path / "p.yaml")]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1


@pytest.mark.realmodel
def test_profile_on_a_users_file_predicts_its_held_out_half_and_bench_measures_it(tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    texts = ["Repeat exactly: the cat sat on the mat, the cat sat on the mat.", "Count from one to twelve in words.",
             "Repeat exactly: one two three four, one two three four.", "List the first eight even numbers."]
    prompts = tmp_path / "mine.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": text, "category": "mine"}) + "\n" for text in texts))
    profile_path = tmp_path / "profile.yaml"
    assert main(["profile", "--backend", "llama.cpp", "--quick", "--prompts", str(prompts), "--drafter", "ngram:3",
                 "--threads", "2", "--context", "128", "-o", str(profile_path)]) == 0  # one cache: T(n) is not tested here
    out = capsys.readouterr().out
    assert "specplan: calibration next: 2 prompts x 64 tokens" in out
    assert "specplan: 2 prompts of " in out and "held out of calibration: the plan predicts" in out
    assert load_plan_and_profile(str(tmp_path / "plan.yaml"))[1].calibration["prompts"].endswith("(calibration half)")
    report = tmp_path / "report"
    assert main(["bench", str(tmp_path / "plan.yaml"), "--prompts", str(prompts), "--held-out", "--max-new-tokens", "8",
                 "--baselines", "plain-runtime", "--no-plots", "--report", str(report)]) == 0
    data = json.loads((report / "report.json").read_text())
    assert data["meta"]["prompt_source"].endswith("(held-out half)") and data["meta"]["prompts"] == 2
    assert {row["prompt_id"] for row in data["rows"]} == {"2", "4"}  # the file's second and fourth lines
