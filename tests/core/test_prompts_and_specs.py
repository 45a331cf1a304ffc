"""Prompt files, the calibration / evaluation split, and drafter specs."""

from __future__ import annotations

import json

import pytest

from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.errors import DrafterSpecError, PromptError
from specplan.core.prompts import read_prompts, spec_bench_split, stratified


def test_split_is_disjoint_and_covers_every_category():
    calibration = spec_bench_split("calibration")
    evaluation = spec_bench_split("evaluation")
    assert not {p.prompt_id for p in calibration} & {p.prompt_id for p in evaluation}
    assert len(calibration) + len(evaluation) == 480
    assert {p.category for p in calibration} == {p.category for p in evaluation}
    chosen = stratified(evaluation, 13)
    assert len({p.category for p in chosen}) == 13


def test_read_prompts_turns_and_prompt(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"question_id": 1, "turns": ["a", "b"]}) + "\n" + json.dumps({"prompt": "c"}) + "\n")
    assert [p.text for p in read_prompts(path)] == ["a", "c"]


@pytest.mark.parametrize("line", ['{"prompt": "   "}', '{"turns": []}', "not json", '{"other": 1}'])
def test_bad_prompt_lines(tmp_path, line):
    path = tmp_path / "p.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(PromptError):
        read_prompts(path)


@pytest.mark.parametrize("spec, expected", [
    ("ngram:3", "ngram-3"), ("ngram:12:4", "ngram-12-4"), ("ngram:16:16", "ngram-16-16"), ("layerskip:20", "layerskip-20"), ("layerskip:0,2,4", "layerskip-0-2-4"),
    ("model:/tmp/some/Small-Model", "model-Small-Model"),
])
def test_drafter_spec_ids(spec, expected):
    assert parse_drafter_spec(spec).id == expected


@pytest.mark.parametrize("spec", ["foo:1", "ngram:x", "ngram:0", "ngram:17", "ngram:3:4", "ngram:3:0", "ngram:3:",
                                  "ngram:3:2:1", "layerskip:a", "model:", "medusa", "recycle:3", "cache:x"])
def test_bad_drafter_specs(spec):
    with pytest.raises(DrafterSpecError):
        parse_drafter_spec(spec)


def test_drafter_training_prompts_leave_out_the_profile_prompts():
    from specplan.core.prompts import PROFILE_PROMPTS, drafter_training_prompts, profile_prompts, spec_bench_split

    measured = {p.prompt_id for p in profile_prompts(PROFILE_PROMPTS)}
    training = drafter_training_prompts(1000)
    assert len(measured) == PROFILE_PROMPTS
    assert not measured & {p.prompt_id for p in training}
    assert len(training) + PROFILE_PROMPTS == len(spec_bench_split("calibration"))
    assert {p.category for p in drafter_training_prompts(13)} == {p.category for p in training}
    assert {p.prompt_id for p in profile_prompts(13)} <= measured  # --quick measures a subset
