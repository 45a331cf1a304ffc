"""The LP dual (HiGHS) equals the hierarchy DP on random instances."""

from __future__ import annotations

import numpy as np
import pytest

from tests.planner.planner_instances import random_profile, with_histograms
from specplan.planner import PlanOptions
from specplan.planner.costs import build_cost_model
from specplan.planner.hierarchy import solve_hierarchy
from specplan.planner.lp import solve_lp


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_stages", [1, 2, 4])
@pytest.mark.parametrize("shapes", [("sequence",), ("sequence", "tree")])
def test_lp_equals_dp(seed, max_stages, shapes):
    rng = np.random.default_rng(seed)
    profile = with_histograms(random_profile(rng, int(rng.integers(2, 6)), int(rng.integers(0, 2)),
                                             pair_density=0.8), rng)
    options = PlanOptions(max_budget=12, max_depth=4, shapes=shapes, max_stages=max_stages)
    costs = build_cost_model(profile, options)
    solution = solve_hierarchy(costs, max_stages)
    lp = solve_lp(costs, max_stages)
    assert lp.success, lp.message
    for model in costs.models:
        assert lp.values[model] == pytest.approx(solution.best(model), rel=1e-7)


def test_lp_is_not_the_trivial_bound():
    """The check can fail: on an instance where speculation helps, the LP optimum is below T(1)."""
    rng = np.random.default_rng(3)
    profile = random_profile(rng, 3, 0)
    options = PlanOptions(max_budget=8, max_depth=3, max_stages=2)
    costs = build_cost_model(profile, options)
    lp = solve_lp(costs, 2)
    target = costs.target
    assert lp.values[target] < costs.latency[target](1) - 1e-6
