"""``run --compare-plain``'s verdict says where outputs part and why, never a bare "no"."""

from __future__ import annotations

from specplan.runtime.lossless import NEAR_TIE
from specplan.runtime.runner import PlainComparison, RunResult


def _result(plain: PlainComparison | None) -> RunResult:
    return RunResult("p", "prompt", (1, 2, 3), "text", 1.0, 3.0, 2, 1.5, (), 4.0, plain)


def test_identical_output_says_so():
    assert PlainComparison(2.0, 1.5, True).describe("bfloat16") == "identical output: yes"


def test_a_near_tie_is_named_with_its_gap():
    text = PlainComparison(2.0, 1.5, False, divergence=37, gap=NEAR_TIE / 4).describe("bfloat16")
    assert "new token 37" in text and "bfloat16 near-tie" in text and f"{NEAR_TIE / 4:.3f}" in text


def test_a_wide_gap_is_a_failure_not_a_tie():
    text = PlainComparison(2.0, 1.5, False, divergence=3, gap=NEAR_TIE * 10).describe("float32")
    assert "NOT a near-tie" in text


def test_json_record_keeps_its_fields_and_adds_the_divergence():
    record = _result(PlainComparison(2.0, 1.5, False, divergence=2, gap=0.1)).as_record()
    assert record["identical_to_plain"] is False and record["first_divergence"] == 2 and record["divergence_gap"] == 0.1
    assert record["new_tokens"] == 3 and record["speedup"] == 1.5
    same = _result(PlainComparison(2.0, 1.5, True)).as_record()
    assert "first_divergence" not in same and same["identical_to_plain"] is True
    assert "speedup" not in _result(None).as_record()
