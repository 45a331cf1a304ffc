"""Reductions: one drafter = Leviathan; one verifier = Sequoia; more models never hurt."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from tests.planner.planner_instances import leviathan, linear_curve, plain_latency, random_profile, rank_vector
from specplan.planner import PlanOptions, solve_plan
from specplan.planner.tree_dp import choose_tree
from specplan.core.profile import AcceptanceEntry, DeviceInfo, ModelEntry, Profile


def two_model_profile(rng, alpha, rank_accept=()):
    target = ModelEntry("target", "default", "fp", role="target",
                        latency=(linear_curve(float(rng.uniform(30, 90)), float(rng.uniform(0.1, 4))),))
    draft = ModelEntry("draft", "model:d", "fp", latency=(linear_curve(float(rng.uniform(1, 20)), 0.05),))
    entry = AcceptanceEntry("draft", "target", 0.0, alpha, 8, rank_accept=rank_accept)
    return Profile(DeviceInfo("cpu", "cpu", "cpu"), (target, draft), (entry,))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.7, 0.95, 1.0])
def test_one_drafter_is_leviathan(seed, alpha):
    """Speedup = max(1, max_gamma T(1) E(gamma, alpha) / (gamma c + T(gamma + 1))) (arXiv 2211.17192)."""
    rng = np.random.default_rng(seed)
    profile = two_model_profile(rng, alpha)
    plain = plain_latency(profile, "target", 1)
    draft = plain_latency(profile, "draft", 1)
    best = max(plain * leviathan(g, alpha) / (g * draft + plain_latency(profile, "target", g + 1))
               for g in range(1, 9))
    result = solve_plan(profile, PlanOptions(shapes=("sequence",), max_stages=1))
    assert result.plan.predicted.speedup == pytest.approx(max(1.0, best), rel=1e-12)
    if best > 1.0:
        gamma = result.plan.stages[0].shape.gamma
        assert result.plan.predicted.accepted_per_target_forward == pytest.approx(leviathan(gamma, alpha))
    else:
        assert result.plan.stages == ()


@pytest.mark.parametrize("seed", range(5))
def test_one_verifier_tree_is_the_sequoia_choice(seed):
    rng = np.random.default_rng(seed)
    accept = rank_vector(rng, 4)
    profile = two_model_profile(rng, accept[0], accept)
    options = PlanOptions(max_budget=24, max_depth=6, shapes=("tree",), max_stages=1)
    choice = choose_tree(accept, lambda w: plain_latency(profile, "draft", w),
                         lambda n: plain_latency(profile, "target", n), 24, 6)
    result = solve_plan(profile, options)
    expected = min(choice.ms_per_token, plain_latency(profile, "target", 1))
    assert result.plan.predicted.ms_per_token == pytest.approx(expected, rel=1e-12)
    if choice.ms_per_token < plain_latency(profile, "target", 1):
        assert result.plan.stages[0].shape.parents == choice.tree.parents


def without(profile, model_id):
    return Profile(profile.device, tuple(m for m in profile.models if m.id != model_id),
                   tuple(a for a in profile.acceptance if model_id not in (a.drafter, a.verifier)), profile.retrieval)


@pytest.mark.parametrize("seed", range(8))
def test_adding_a_model_never_hurts(seed):
    rng = np.random.default_rng(seed)
    profile = random_profile(rng, 5, 1, pair_density=0.8)
    options = PlanOptions(max_budget=12, max_depth=4, max_stages=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = solve_plan(profile, options).plan.predicted.ms_per_token
        for model in profile.models:
            if model.role != "target":
                fewer = solve_plan(without(profile, model.id), options).plan.predicted.ms_per_token
                assert full <= fewer * (1 + 1e-12)
