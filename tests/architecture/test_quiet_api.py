"""The public API: importable without torch, and what the README shows runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import specplan
from specplan.core.errors import PlanError

ROOT = Path(__file__).resolve().parents[2]


def test_import_specplan_and_solving_load_no_torch():
    code = ("import sys, specplan; p = specplan.load_profile('profiles/cpu/profile.yaml'); "
            "plan = specplan.solve(p); assert 'torch' not in sys.modules, 'torch imported'; print(plan.summary())")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "-> target" in result.stdout


def test_solve_matches_the_cli_plan():
    golden_case = ROOT / "tests" / "golden_plans" / "cpu"  # the profile and the plan solved from it
    plan = specplan.solve(specplan.load_profile(golden_case / "profile.yaml"))
    golden = specplan.load_plan(golden_case / "plan.yaml")
    assert plan.stages == golden.stages
    assert plan.predicted.ms_per_token == pytest.approx(golden.predicted.ms_per_token, abs=1e-4)  # the file rounds


def test_solve_with_stages_and_bad_stages():
    profile = specplan.load_profile(ROOT / "profiles" / "cpu-gptq" / "profile.yaml")
    assert len(specplan.solve(profile, stages=2).stages) == 2
    assert specplan.solve(profile, stages=0).stages == ()
    with pytest.raises(PlanError, match="--stages"):
        specplan.solve(profile, stages=9)


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError):
        specplan.not_a_name  # noqa: B018
