"""The Monte-Carlo simulator agrees with the closed forms within its interval; overshoot."""

from __future__ import annotations

import numpy as np
import pytest

from tests.planner.planner_instances import random_profile, rank_vector, reference_accepted, with_histograms
from specplan.core.profile import AcceptanceEntry
from specplan.planner import PlanOptions, solve_plan
from specplan.planner.simulate import SimStage, closed_form, simulate
from specplan.planner.tree_dp import best_tree

CONFIDENCE = 0.999
VERIFY = tuple([float("nan")] + [20.0 + 0.5 * n for n in range(1, 64)])


@pytest.mark.parametrize("gamma", [1, 4, 8])
@pytest.mark.parametrize("alpha", [0.0, 0.4, 0.8, 1.0])
def test_sequence_stage_matches_leviathan(gamma, alpha):
    stage = SimStage("sequence", VERIFY, gamma=gamma, alpha=alpha, draft_ms=2.0)
    result = simulate([stage], rounds=20000, seed=gamma, confidence=CONFIDENCE)
    assert result.ci_low <= result.closed_form <= result.ci_high
    assert result.overshoot_tokens == (0.0,)


@pytest.mark.parametrize("seed", range(3))
def test_tree_stage_matches_sequoia(seed):
    accept = rank_vector(np.random.default_rng(seed), 3)
    tree = best_tree(accept, 12, 4)
    stage = SimStage("tree", VERIFY, parents=tree.parents, rank_accept=accept, draft_ms=3.0)
    result = simulate([stage], rounds=20000, seed=seed, confidence=CONFIDENCE)
    assert result.agrees(), result


@pytest.mark.parametrize("gamma", [2, 6, 9])
def test_sequence_stage_samples_the_histogram(gamma):
    """A heavy-tailed (not i.i.d.) histogram: the simulator follows it for gamma <= G, alpha beyond."""
    hist = (60, 5, 5, 5, 5, 5, 15)
    stage = SimStage("sequence", VERIFY, gamma=gamma, alpha=0.4, draft_ms=0.1, accepted_hist=hist)
    result = simulate([stage], rounds=20000, seed=gamma, confidence=CONFIDENCE)
    entry = AcceptanceEntry("d", "v", 0.0, 0.4, 6, hist)
    assert result.closed_form == pytest.approx((gamma * 0.1 + VERIFY[gamma + 1]) / reference_accepted(entry, gamma))
    assert result.agrees(), result


@pytest.mark.parametrize("gamma", [1, 4, 6])
def test_a_lookup_that_drafts_fewer_verifies_fewer(gamma):
    """A bottom retrieval stage whose lookup drafted nothing in 70% of the rounds: each round
    verifies min(D, gamma) + 1 tokens, and the closed form's V(gamma) is their mean cost."""
    drafted = (70, 0, 5, 0, 5, 5, 15)
    hist = (75, 5, 5, 5, 5, 0, 5)
    stage = SimStage("sequence", VERIFY, gamma=gamma, alpha=0.4, draft_ms=0.1, accepted_hist=hist, drafted_hist=drafted)
    result = simulate([stage], rounds=20000, seed=gamma, confidence=CONFIDENCE)
    entry = AcceptanceEntry("d", "v", 0.0, 0.4, 6, hist, drafted_hist=drafted)
    verify = sum(count * VERIFY[min(d, gamma) + 1] for d, count in enumerate(drafted)) / sum(drafted)
    assert result.closed_form == pytest.approx((gamma * 0.1 + verify) / reference_accepted(entry, gamma))
    assert result.agrees(), result
    full = SimStage("sequence", VERIFY, gamma=gamma, alpha=0.4, draft_ms=0.1, accepted_hist=hist)
    assert not result.ci_low <= closed_form([full]) <= result.ci_high  # T(gamma + 1) every round is rejected


def test_interval_can_reject_a_wrong_closed_form():
    """Power: a 5% error in alpha is outside the interval."""
    stage = SimStage("sequence", VERIFY, gamma=4, alpha=0.7, draft_ms=2.0)
    wrong = SimStage("sequence", VERIFY, gamma=4, alpha=0.75, draft_ms=2.0)
    result = simulate([stage], rounds=20000, seed=1, confidence=CONFIDENCE)
    assert not result.ci_low <= closed_form([wrong]) <= result.ci_high


def test_two_stages_without_overshoot_match_the_closed_form():
    """Bottom alpha = 0 commits exactly one token per round: no overshoot, gamma * L*(j) is exact."""
    bottom = SimStage("sequence", tuple(5.0 + 0.1 * n if n else float("nan") for n in range(64)), gamma=3,
                      alpha=0.0, draft_ms=1.0)
    top = SimStage("sequence", VERIFY, gamma=5, alpha=0.8)
    result = simulate([bottom, top], rounds=20000, seed=2, confidence=CONFIDENCE)
    assert result.overshoot_tokens[1] == 0.0
    assert result.agrees(), result


@pytest.mark.parametrize("rule", ["trim", "verify"])
def test_overshoot_is_measured(rule):
    """Chunks of several tokens overshoot gamma; trimming wastes them and costs more than the closed form."""
    bottom = SimStage("sequence", tuple(5.0 + 0.1 * n if n else float("nan") for n in range(64)), gamma=4,
                      alpha=0.8, draft_ms=1.0)
    top = SimStage("sequence", VERIFY, gamma=5, alpha=0.8)
    result = simulate([bottom, top], rounds=20000, seed=3, overshoot=rule, confidence=CONFIDENCE)
    assert result.overshoot_tokens[1] > 0.5
    if rule == "trim":
        assert result.ci_low > result.closed_form
        assert result.overshoot_error_ms > 0


def test_seeded_and_deterministic():
    stage = SimStage("sequence", VERIFY, gamma=3, alpha=0.6, draft_ms=1.0)
    assert simulate([stage], rounds=2000, seed=7) == simulate([stage], rounds=2000, seed=7)
    assert simulate([stage], rounds=2000, seed=7) != simulate([stage], rounds=2000, seed=8)


@pytest.mark.parametrize("seed", range(3))
def test_simulated_plan_agrees_for_single_stage_plans(seed):
    rng = np.random.default_rng(seed)
    profile = with_histograms(random_profile(rng, 3, 1), rng, share=0.7)
    options = PlanOptions(max_budget=12, max_depth=4, max_stages=1, simulation_rounds=20000, seed=seed)
    result = solve_plan(profile, options)
    if result.plan.stages:
        assert result.simulation.closed_form == pytest.approx(result.plan.predicted.ms_per_token, rel=1e-9)
        low, high = result.plan.solver["simulated"]["interval"]
        half = (high - low) / 2 * 3.29 / 1.96  # widen the stored 95% interval to 99.9%
        assert abs(result.plan.predicted.ms_per_token - result.simulation.ms_per_token) <= half + 1e-6


def test_bad_arguments():
    stage = SimStage("sequence", VERIFY, gamma=3, alpha=0.6, draft_ms=1.0)
    with pytest.raises(ValueError):
        simulate([stage], overshoot="keep")
    with pytest.raises(ValueError):
        simulate([stage, SimStage("tree", VERIFY, parents=(-1, 0), rank_accept=(0.5,))])
