"""A plan runs without its profile file: ``specplan plan`` writes the part of the profile that running reads
into the plan (core/profile.py ``carried_part``), and core/contract.py ``load_plan_and_profile`` runs from
that copy, checked by its sha256, where the file is gone."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from specplan.api import solve_plan_file
from specplan.cli.main import main
from specplan.core.contract import load_plan_and_profile
from specplan.core.errors import PlanError
from specplan.core.plan import load_plan, save_plan
from specplan.core.profile import carried_part, load_profile, profile_to_dict
from specplan.planner.options import runtime_options
from specplan.planner.recheck import check_prediction

STORED = Path(__file__).resolve().parents[2] / "profiles" / "cpu-smollm2-llamacpp-edit-quick" / "profile.yaml"
EDIT_PAIR = STORED.parents[1] / "transfer-qwen-epyc" / "cal-humaneval-edit" / "profile.yaml"
PROMPT = "Repeat this sentence twice: the cache keeps every committed token but the last."


def solved(folder: Path, stages: int | None = 1) -> Path:
    """A plan solved from a copy of the stored default-model llama.cpp profile in ``folder``."""
    profile_path, plan_path = folder / "profile.yaml", folder / "plan.yaml"
    shutil.copy(STORED, profile_path)
    save_plan(solve_plan_file(load_profile(profile_path), profile_path, plan_path, runtime_options(), stages=stages).plan,
              plan_path)
    return plan_path


def test_the_carried_copy_is_the_profile_less_what_only_plan_reads(tmp_path):
    plan_path = solved(tmp_path)
    original = load_profile(tmp_path / "profile.yaml")
    (tmp_path / "profile.yaml").unlink()
    plan, profile, path = load_plan_and_profile(str(plan_path))
    assert path == plan_path and plan.profile_sha256 == ""  # no file to have changed
    assert profile.target == original.target and profile.device == original.device
    assert profile.retrieval == original.retrieval and profile.prediction is None
    assert profile.acceptance == tuple(replace(entry, per_prompt=()) for entry in original.acceptance)
    check_prediction(plan, profile)  # the carried acceptance and curves re-cost the plan to its prediction


def test_the_copy_is_a_fraction_of_a_profile_with_per_prompt_counts_and_a_prediction_replay():
    profile = load_profile(EDIT_PAIR)
    assert profile.prediction is not None and profile.acceptance[0].per_prompt
    carried = yaml.safe_dump(profile_to_dict(carried_part(profile)))
    assert len(carried) < len(EDIT_PAIR.read_text()) / 5


def test_the_profile_file_wins_where_it_is_and_its_changes_are_still_refused(tmp_path):
    plan_path = solved(tmp_path)
    plan, profile, path = load_plan_and_profile(str(plan_path))
    assert path == tmp_path / "profile.yaml" and plan.profile_sha256.startswith("sha256:")
    assert profile == load_profile(tmp_path / "profile.yaml")  # the file's own, not the copy


def test_an_edited_copy_or_no_copy_is_a_one_line_error(tmp_path, capsys):
    plan_path = solved(tmp_path)
    (tmp_path / "profile.yaml").unlink()
    document = yaml.safe_load(plan_path.read_text())
    document["carried_profile"]["profile"]["models"][0]["latency"][0]["ms"][0] *= 0.5  # a faster T(1) by hand
    plan_path.write_text(yaml.safe_dump(document, sort_keys=False))
    with pytest.raises(PlanError, match="does not match its sha256"):
        load_plan_and_profile(str(plan_path))
    del document["carried_profile"]
    plan_path.write_text(yaml.safe_dump(document, sort_keys=False))
    assert load_plan(plan_path).carried_profile is None
    assert main(["run", str(plan_path), "--prompt", PROMPT, "--max-new-tokens", "4"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "carries no copy" in error


@pytest.mark.realmodel
def test_specplan_run_gives_the_same_tokens_from_the_plan_alone(tmp_path, capsys):
    pytest.importorskip("llama_cpp")
    plan_path = solved(tmp_path)
    arguments = ["run", str(plan_path), "--threads", "2", "--prompt", PROMPT, "--max-new-tokens", "24", "--json"]
    outputs = []
    for keep_profile in (True, False):
        if not keep_profile:
            (tmp_path / "profile.yaml").unlink()
        capsys.readouterr()
        assert main(arguments) == 0
        outputs.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1]))
    assert outputs[0]["new_tokens"] > 0
    assert outputs[0]["token_ids"] == outputs[1]["token_ids"]
