"""solve_plan end to end: the runtime restriction, the plan file, alternatives, explain, purity."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

from tests.planner.planner_instances import random_profile
from specplan.core.plan import load_plan, plan_from_dict, plan_to_dict, save_plan
from specplan.planner import PlanOptions, explain, solve_plan

SEQUENCE_ONLY = PlanOptions(shapes=("sequence",), max_stages=1)


def solve(profile, options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return solve_plan(profile, options, profile_path="profile.yaml", profile_sha256="sha256:abc")


@pytest.mark.parametrize("seed", range(10))
def test_sequence_only_single_stage(seed):
    """What the runtime runs today: plain decoding or one drafter -> target sequence stage."""
    profile = random_profile(np.random.default_rng(seed), 5, 1)
    result = solve(profile, SEQUENCE_ONLY)
    stages = result.plan.stages
    assert len(stages) <= 1
    assert all(s.shape.kind == "sequence" and s.verifier == profile.target.id for s in stages)
    for candidate in result.candidates:
        assert len(candidate.stages) <= 1
        assert all(s.shape.kind == "sequence" for s in candidate.stages)
    full = solve(profile, PlanOptions(max_budget=16, max_depth=4))
    assert full.plan.predicted.ms_per_token <= result.plan.predicted.ms_per_token * (1 + 1e-12)


def test_zero_stages_is_plain():
    result = solve(random_profile(np.random.default_rng(0), 3), PlanOptions(max_stages=0))
    assert result.plan.stages == () and len(result.candidates) == 1


@pytest.mark.parametrize("seed", range(5))
def test_plan_round_trips(seed, tmp_path):
    profile = random_profile(np.random.default_rng(seed), 4, 1)
    plan = solve(profile, PlanOptions(max_budget=16, max_depth=4, simulation_rounds=500)).plan
    document = plan_to_dict(plan)
    again = plan_from_dict(document)
    assert again.stages == plan.stages
    assert plan_to_dict(again) == document
    save_plan(plan, tmp_path / "plan.yaml")
    loaded = load_plan(tmp_path / "plan.yaml")
    assert loaded.stages == plan.stages and plan_to_dict(loaded) == document


@pytest.mark.parametrize("seed", range(5))
def test_prediction_alternatives_and_candidates(seed):
    profile = random_profile(np.random.default_rng(seed), 4, 1)
    result = solve(profile, PlanOptions(max_budget=16, max_depth=4))
    plan, rows = result.plan, result.candidates
    predicted = plan.predicted
    assert result.status == "optimal" and plan.solver["lp_agrees"] is True
    assert predicted.ms_per_token == pytest.approx(rows[0].ms_per_token)
    assert predicted.tokens_per_s == pytest.approx(1000.0 / predicted.ms_per_token)
    plain = next(row for row in rows if not row.stages)
    assert predicted.speedup == pytest.approx(plain.ms_per_token / predicted.ms_per_token)
    assert predicted.accepted_per_target_forward == pytest.approx(rows[0].accepted_length)
    assert [row.ms_per_token for row in rows] == sorted(row.ms_per_token for row in rows)
    for row in rows:
        if row.stages:
            assert row.ms_per_token == pytest.approx((row.draft_ms + row.verify_ms) / row.accepted_length)
    alternatives = plan.alternatives
    assert 1 <= len(alternatives) <= 5
    assert len({a.summary for a in alternatives}) == len(alternatives)
    assert all(a.ms_per_token >= predicted.ms_per_token for a in alternatives)
    assert [a.ms_per_token for a in alternatives] == sorted(a.ms_per_token for a in alternatives)
    assert plan.solver["method"] == "dp" and plan.solver["checked_by"] == "lp"
    assert plan.profile_sha256 == "sha256:abc" and plan.device == {"kind": "cpu", "sku": "cpu"}


def test_explain_lists_every_candidate_sorted():
    profile = random_profile(np.random.default_rng(1), 3, 1)
    result = solve(profile, PlanOptions(max_budget=12, max_depth=4, simulation_rounds=1000))
    text = explain(result)
    positions = [text.index(row.summary) for row in result.candidates]
    assert positions == sorted(positions)
    assert "ms/token" in text and "simulated" in text
    assert sum(1 for line in text.splitlines() if line[4:5] == "*") == 1


def test_planner_never_imports_torch():
    code = ("import sys; import specplan.planner, specplan.planner.simulate, specplan.planner.lp; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


