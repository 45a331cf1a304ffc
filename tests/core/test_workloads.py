"""Workloads: HumanEval and Spec-Bench split in code into disjoint calibration and evaluation parts."""

from __future__ import annotations

import pytest

from specplan.core.errors import PromptError
from specplan.core.workloads import WORKLOADS, humaneval_prompts, workload_split


def test_humaneval_has_164_tasks_split_41_123_without_overlap():
    calibration, evaluation = workload_split("humaneval", "calibration"), workload_split("humaneval", "evaluation")
    assert len(humaneval_prompts()) == 164 and (len(calibration), len(evaluation)) == (41, 123)
    assert not {p.prompt_id for p in calibration} & {p.prompt_id for p in evaluation}
    assert all(int(p.prompt_id) % 4 == 0 for p in calibration)
    assert calibration[0].text.endswith("```") and "def has_close_elements" in calibration[0].text


@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_workload_has_both_splits(workload):
    assert workload_split(workload, "calibration") and workload_split(workload, "evaluation")


def test_unknown_workload_or_split_is_a_prompt_error():
    with pytest.raises(PromptError, match="use one of"):
        workload_split("mmlu", "calibration")
    with pytest.raises(PromptError, match="calibration or evaluation"):
        workload_split("humaneval", "train")


def test_humaneval_edit_reprints_each_canonical_solution_with_every_edit_in_both_splits():
    calibration, evaluation = (workload_split("humaneval-edit", split) for split in ("calibration", "evaluation"))
    assert [p.prompt_id for p in calibration] == [p.prompt_id for p in workload_split("humaneval", "calibration")]
    assert {p.category for p in calibration} == {p.category for p in evaluation} == {
        "edit-type-hints", "edit-docstring", "edit-rename", "edit-comprehension"}
    first = next(p for p in calibration if p.prompt_id == "0")
    assert "def has_close_elements" in first.text and "for idx, elem in enumerate(numbers):" in first.text  # the solution
    assert first.text.startswith("Add type hints") and first.text.endswith("```")
