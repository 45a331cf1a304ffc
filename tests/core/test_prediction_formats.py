"""The prediction's sections of profile.yaml and plan.yaml (core/prediction.py): round trips, files without
them loading as before, one-line errors; the prompts that carry a prediction (humaneval-edit, a JSONL file)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from specplan.core.errors import PlanError, ProfileError, PromptError
from specplan.core.plan import load_plan, plan_from_dict, plan_to_dict, save_plan
from specplan.core.prediction import PredictionCalibration, PredictionCandidate, PredictionLengths
from specplan.core.profile import load_profile, profile_from_dict, profile_to_dict, save_profile
from specplan.core.prompts import read_prompts
from specplan.core.workloads import humaneval_edit_prompts
from tests.core.test_formats import make_plan, make_profile

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = PredictionCalibration(40, 4800, 0.0125, (PredictionCandidate(16, 2, ((0, 120), (16, 30), (63, 12)), 3900),
                                                      PredictionCandidate(63, 12, ((0, 300), (63, 10)), 3100)))
LENGTHS = PredictionLengths(16, 2, 3.5, 285.7143, 4.2, 2.75,
                            (("prompts", "humaneval-edit:calibration"), ("count", 40), ("tokens", 4800)))


def test_profile_round_trip_with_a_prediction_and_without(tmp_path):
    profile = replace(make_profile(), prediction=CALIBRATION)
    save_profile(profile, tmp_path / "profile.yaml")
    assert load_profile(tmp_path / "profile.yaml") == profile
    text = (tmp_path / "profile.yaml").read_text()
    assert text.startswith("schema_version: 1") and "drafted: {0: 120, 16: 30, 63: 12}" in text
    assert "prediction" not in profile_to_dict(make_profile())  # none: the file reads as before


def test_stored_profiles_and_plans_without_the_sections_still_load():
    profile = load_profile(ROOT / "profiles" / "cpu" / "profile.yaml")
    plan = load_plan(ROOT / "profiles" / "cpu" / "plan.yaml")
    assert profile.prediction is None and plan.prediction is None


def test_plan_round_trip_with_a_prediction_and_without(tmp_path):
    plan = replace(make_plan(), prediction=LENGTHS)
    save_plan(plan, tmp_path / "plan.yaml")
    assert load_plan(tmp_path / "plan.yaml") == plan
    assert plan_to_dict(plan)["prediction"] == {
        "first": 16, "min_match": 2,
        "predicted": {"ms_per_token": 3.5, "tokens_per_s": 285.7143, "speedup": 4.2, "accepted_per_target_forward": 2.75},
        "calibrated_on": {"prompts": "humaneval-edit:calibration", "count": 40, "tokens": 4800}}
    assert "prediction" not in plan_to_dict(make_plan())


@pytest.mark.parametrize("change, fragment", [
    (lambda section: section.update(first=0), "prediction.first = 0 is out of range"),
    (lambda section: section.update(min_match="two"), "prediction.min_match must be an integer"),
    (lambda section: section["predicted"].update(ms_per_token=float("nan")), "prediction.predicted.ms_per_token"),
    (lambda section: section.pop("predicted"), "prediction must be a mapping with first, min_match and predicted"),
])
def test_a_bad_plan_section_is_one_line(change, fragment):
    document = plan_to_dict(replace(make_plan(), prediction=LENGTHS))
    change(document["prediction"])
    with pytest.raises(PlanError, match=re.escape(fragment)):
        plan_from_dict(document)


@pytest.mark.parametrize("change, fragment", [
    (lambda section: section["candidates"][0]["drafted"].update({64: 1}), "drafted = 64 is out of range"),
    (lambda section: section["candidates"][1].update(first=-1), "candidates[1].first = -1 is out of range"),
    (lambda section: section.update(ms_per_call=-1.0), "prediction.ms_per_call = -1.0 must be a finite number"),
    (lambda section: section["candidates"][0].pop("drafted"), "must be a mapping with first, min_match"),
])
def test_a_bad_profile_section_is_one_line(change, fragment):
    document = profile_to_dict(replace(make_profile(), prediction=CALIBRATION))
    change(document["prediction"])
    with pytest.raises(ProfileError, match=re.escape(fragment)):
        profile_from_dict(document)


def test_each_humaneval_edit_prompt_predicts_the_code_it_asks_to_edit_as_serve_http_sends_it():
    code = re.compile(r"```python\n(.*?)\n```", re.DOTALL)  # measurements/serve_http.py one_request
    for prompt in humaneval_edit_prompts():
        assert prompt.prediction == "```python\n" + code.search(prompt.text).group(1) + "\n```"


def test_a_prompts_file_may_carry_a_prediction(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "Fix it.", "prediction": "x = 1\n"}) + "\n" + json.dumps({"prompt": "Hi"}) + "\n")
    assert [prompt.prediction for prompt in read_prompts(path)] == ["x = 1\n", ""]
    path.write_text(json.dumps({"prompt": "Fix it.", "prediction": {"content": "x"}}) + "\n")
    with pytest.raises(PromptError, match="prompts.jsonl:1 has a `prediction` that is not a string"):
        read_prompts(path)
