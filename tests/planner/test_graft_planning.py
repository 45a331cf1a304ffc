"""The planner's prune-then-graft trees (Graft, arXiv 2605.20104; docs/planner-math.md section 3)
against brute force over every ordered tree, every model width B and every retrieval drafter."""

from __future__ import annotations

import math
import warnings

import pytest

from tests.planner.planner_instances import (
    linear_curve,
    ordered_trees,
    plain_latency,
    reference_chain_cost,
    reference_ranks,
    reference_tree_value,
    tree_parents,
)
from specplan.core.plan import Stage, StageShape
from specplan.planner import PlanOptions, solve_plan
from specplan.planner.simulate import simulate_plan
from specplan.planner.tree_dp import graft_model_width
from specplan.core.profile import AcceptanceEntry, DeviceInfo, ModelEntry, Profile, RetrievalEntry

HEAD_RANKS = (0.26, 0.11, 0.05, 0.03)


def graft_profile(graft_siblings: str = "head", retrieval_rank_accept=(0.14, 0.016),
                  cache_rank_accept=(0.10, 0.01)) -> Profile:
    """A cheap head (the drafter whose siblings were present) and two retrieval drafters."""
    models = (
        ModelEntry("target", "default", "fp", role="target", latency=(linear_curve(20.0, 0.4),)),
        ModelEntry("head", "head:h", "", latency=(linear_curve(1.8, 0.02),)),
    )
    stores = (RetrievalEntry("ngram", "ngram:3", 0.05), RetrievalEntry("cache", "cache", 0.06))
    acceptance = (
        AcceptanceEntry("head", "target", 0.0, 0.26, 8, rank_accept=HEAD_RANKS),
        AcceptanceEntry("ngram", "target", 0.0, 0.25, 8, rank_accept=(0.25, 0.04),
                        retrieval_rank_accept=retrieval_rank_accept),
        AcceptanceEntry("cache", "target", 0.0, 0.25, 8, rank_accept=(0.25, 0.04),
                        retrieval_rank_accept=cache_rank_accept),
    )
    calibration = {"graft_siblings": graft_siblings} if graft_siblings else {}
    return Profile(DeviceInfo("cpu", "test cpu", "cpu"), models, acceptance, stores, calibration=calibration)


def brute_force_graft(profile: Profile, max_budget: int, max_depth: int) -> float:
    """The cheapest head tree with at least one retrieved node, over every tree, B and store."""
    best = math.inf
    for store in ("ngram", "cache"):
        retrieved = profile.acceptance_for(store, "target", 0.0).retrieval_rank_accept
        for model_width in range(1, len(HEAD_RANKS) + 1):
            accept = HEAD_RANKS[:model_width] + tuple(retrieved)
            for nodes in range(2, max_budget + 1):
                for tree in ordered_trees(nodes, max_depth, len(accept)):
                    parents = tree_parents(tree)
                    if not any(rank >= model_width for rank in reference_ranks(parents)[1:]):
                        continue
                    budget = sum(rank >= model_width for rank in reference_ranks(parents)[1:])
                    stage = Stage("head", "target", StageShape("tree", parents=parents, graft=store,
                                                               graft_budget=budget))
                    best = min(best, reference_chain_cost(profile, (stage,)))
    return best


def solve(profile: Profile, options: PlanOptions):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return solve_plan(profile, options)


def test_the_planner_grafts_retrieved_tokens_into_the_head_tree_at_the_brute_force_optimum():
    options = PlanOptions(max_budget=7, max_depth=3, max_stages=1)
    profile = graft_profile()
    result = solve(profile, options)
    (stage,) = result.plan.stages
    assert stage.drafter == "head" and stage.shape.graft == "ngram" and stage.shape.graft_budget >= 1
    expected = brute_force_graft(profile, options.max_budget, options.max_depth)
    assert result.plan.predicted.ms_per_token == pytest.approx(expected, rel=1e-9)
    assert reference_chain_cost(profile, result.plan.stages) == pytest.approx(expected, rel=1e-9)
    head_trees = [row.stages[0] for row in result.candidates
                  if row.stages and row.stages[0].drafter == "head" and row.stages[0].shape.kind == "tree"]
    assert head_trees and all(stage.shape.graft for stage in head_trees)  # the pair's best tree is the graft
    assert "grafted from ngram" in result.plan.summary()


def test_without_graft_siblings_in_the_profile_no_graft_is_planned():
    """Retrieval acceptance measured beside another drafter's siblings says nothing about this one."""
    result = solve(graft_profile(graft_siblings=""), PlanOptions(max_budget=7, max_depth=3, max_stages=1))
    assert all(not stage.shape.graft for row in result.candidates for stage in row.stages)


def test_useless_retrieved_siblings_are_not_grafted():
    profile = graft_profile(retrieval_rank_accept=(0.0, 0.0), cache_rank_accept=(0.0,))
    result = solve(profile, PlanOptions(max_budget=7, max_depth=3, max_stages=1))
    assert not any(stage.shape.graft for stage in result.plan.stages)


def test_the_simulator_agrees_with_the_graft_closed_form():
    profile = graft_profile()
    plan = solve(profile, PlanOptions(max_budget=7, max_depth=3, max_stages=1)).plan
    simulation = simulate_plan(plan, profile, rounds=40000, seed=3)
    assert simulation.ci_low <= plan.predicted.ms_per_token <= simulation.ci_high


@pytest.mark.parametrize("parents, retrieved, width", [
    ((-1, 0, 0, 0, 1), 1, 2), ((-1, 0, 0, 1, 1, 2), 2, 1), ((-1, 0, 0, 0, 0), 3, 1), ((-1, 0, 1, 1), 1, 1),
])
def test_model_width_is_read_off_the_tree(parents, retrieved, width):
    assert graft_model_width(parents, retrieved) == width
    assert sum(rank >= width for rank in reference_ranks(parents)[1:]) == retrieved


def test_plain_latency_reference_is_the_curve():  # the brute force above reads T(n) from the curve itself
    assert plain_latency(graft_profile(), "target", 3) == pytest.approx(20.8)
    assert reference_tree_value((-1, 0, 0), HEAD_RANKS[:1] + (0.14,)) == pytest.approx(1.4)


def test_a_graft_budget_the_tree_cannot_hold_is_a_plan_error():
    from specplan.core.errors import PlanError
    from specplan.core.plan import Plan, Prediction
    from specplan.planner.simulate import plan_stages

    shape = StageShape("tree", parents=(-1, 0, 0, 1), graft="ngram", graft_budget=2)  # only 1 node has rank >= 1
    plan = Plan("", "", {"kind": "cpu", "sku": "cpu"}, "target", 0.0, (Stage("head", "target", shape),),
                Prediction(10.0, 100.0, 1.0, 1.0))
    with pytest.raises(PlanError, match="fix the plan"):
        plan_stages(plan, graft_profile())
