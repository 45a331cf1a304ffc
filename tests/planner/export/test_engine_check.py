"""The engine check's own arithmetic (measurements/engine_check.py, engine_interfaces.py), without an
engine: the engines themselves run only in scripts/check-engines.sh, never in CI."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "measurements"))
from engine_check import sglang_table, table  # noqa: E402
from engine_interfaces import comparable, literal_names  # noqa: E402


def test_literal_names_flattens_nested_literals():
    inner = Literal["eagle", "eagle3"]
    assert literal_names(Literal["ngram", inner, Literal["suffix"]]) == ["ngram", "eagle", "eagle3", "suffix"]


def test_a_schedule_given_as_lists_equals_the_engines_tuples():
    assert comparable([(1, 3, 4), (4, 7, 2)]) == comparable([[1, 3, 4], [4, 7, 2]])
    assert comparable([(1, 3, 4)]) != comparable([[1, 3, 5]])


def case(key: str, config: dict | None, model: str = "m", workload: str = "humaneval") -> dict:
    return {"key": key, "speculative_config": config, "model": model, "workload": workload,
            "predicted_speedup": 1.5, "predicted_per_forward": 2.0}


def run(name: str, rate: float, drafts: float = 0, accepted: float = 0) -> dict:
    return {"run": name, "started": True, "start_s": 100.0, "summary": {"decode_pooled": rate},
            "metrics": {"drafts": drafts, "accepted_tokens": accepted} if drafts else {}}


def test_the_speedup_is_over_the_plain_run_of_the_same_target_and_workload():
    cases = {"spec": case("spec", {"method": "ngram"}), "other": case("other", {"method": "ngram"}, model="n"),
             "base": case("base", None)}
    rows = table(cases, {}, [run("plain:base", 8.0), run("spec", 12.0, drafts=10, accepted=15),
                             run("other", 9.0, drafts=10, accepted=1)])
    spec = next(row for row in rows if row.startswith("| spec |"))
    assert "| 12.00 | 1.50x | 1.50x | 2.50 / 2.00 |" in spec
    other = next(row for row in rows if row.startswith("| other |"))
    assert "| 9.00 | - |" in other  # no plain run of its model: no speedup invented


def test_a_server_that_did_not_start_shows_the_engines_message():
    cases = {"bad": case("bad", {"method": "ngram"})}
    rows = table(cases, {"bad": {"verdict": "rejected", "message": "ValueError: no"}},
                 [{"run": "bad", "started": False, "message": "ValueError: no"}])
    assert "rejected: ValueError: no" in rows[-1] and "no: ValueError: no" in rows[-1]


def test_sglang_rows_say_what_its_checks_changed_or_refused():
    cases = [{"key": "a", "argv": ["--model-path", "/models/x", "--speculative-num-draft-tokens", "8"]},
             {"key": "b", "argv": ["--model-path", "/models/x", "--speculative-algorithm", "BOGUS"]}]
    checks = {"a": {"verdict": "changed", "changed": {"speculative_num_draft_tokens": [8, 4]}},
              "b": {"verdict": "rejected", "message": "ValueError: Unknown speculative algorithm name: BOGUS"}}
    rows = sglang_table(cases, checks)
    assert "`--speculative-num-draft-tokens 8` | changed" in rows[2] and "[8, 4]" in rows[2]
    assert rows[3].endswith("rejected: ValueError: Unknown speculative algorithm name: BOGUS |")
