"""Sequoia tree DP against brute-force enumeration of every ordered rooted tree (<= 10 nodes)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.planner.planner_instances import brute_force_tree_values, ordered_trees, rank_vector, tree_parents
from specplan.core.parents import depth_and_width
from specplan.planner.tree_dp import (
    best_tree,
    choose_tree,
    graft_tree,
    sibling_ranks,
    solve_tree_table,
    tree_from_table,
    tree_value,
)


def test_tree_counts_are_catalan():
    """The enumerator is complete: ordered trees of n nodes are counted by Catalan(n - 1)."""
    for nodes in range(1, 11):
        assert len(ordered_trees(nodes, nodes, nodes)) == math.comb(2 * nodes - 2, nodes - 1) // nodes


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("depth", [1, 2, 3, 5])
@pytest.mark.parametrize("width", [1, 2, 3])
def test_dp_equals_brute_force_and_tree_attains_it(seed, depth, width):
    rng = np.random.default_rng(1000 * seed + 10 * depth + width)
    accept = rank_vector(rng, width)
    if seed == 3:
        accept = tuple(0.0 if k == 1 else p for k, p in enumerate(accept))  # a zero rank in the middle
    table = solve_tree_table(accept, 10, depth)
    for nodes in range(1, 11):
        values = brute_force_tree_values(accept, nodes, depth)
        solution = tree_from_table(table, nodes, depth)
        if values.size == 0:
            assert solution is None, f"DP found a tree of {nodes} nodes that the caps forbid"
            continue
        assert solution is not None
        assert solution.value == pytest.approx(values.max(), rel=1e-12, abs=1e-12)
        parents = solution.parents
        assert len(parents) == nodes and parents[0] == -1
        assert all(0 <= parents[i] < i for i in range(1, nodes))
        assert solution.ranks == sibling_ranks(parents)
        assert max(solution.ranks, default=0) < width
        assert solution.depth == depth_and_width(parents)[0] <= depth
        assert solution.width == depth_and_width(parents)[1]
        assert tree_value(parents, accept) == pytest.approx(solution.value, rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_best_tree_matches_table(seed):
    accept = rank_vector(np.random.default_rng(seed), 4)
    table = solve_tree_table(accept, 12, 4)
    for nodes in (2, 7, 12):
        assert best_tree(accept, nodes, 4).parents == tree_from_table(table, nodes, 4).parents


def test_tree_value_literal():
    # root -> {a (rank 0), b (rank 1)}, a -> c (rank 0): 1 + 0.5 + 0.2 + 0.25
    assert tree_value([-1, 0, 0, 1], [0.5, 0.2]) == pytest.approx(1.95)
    assert tree_parents(((((),),), ())) == (-1, 0, 0, 1, 3)


@pytest.mark.parametrize("seed", range(6))
def test_choose_tree_is_the_sequoia_choice(seed):
    """With a width-independent draft cost, the choice equals min over (n, d) of the brute force."""
    rng = np.random.default_rng(50 + seed)
    accept = rank_vector(rng, 3)
    draft = float(rng.uniform(0.5, 10.0))
    base, slope = float(rng.uniform(20, 60)), float(rng.uniform(0.2, 6.0))
    if seed >= 4:  # confident drafter, cheap drafts: the deepest cap wins
        accept, draft, slope = (0.9 - 0.1 * (seed - 4), 0.05, 0.02), 0.1, 0.1
    verify = lambda n: base + slope * (n - 1)  # noqa: E731
    expected = math.inf
    for nodes in range(2, 11):
        for depth in range(1, 5):
            values = brute_force_tree_values(accept, nodes, depth)
            if values.size:
                expected = min(expected, (depth * draft + verify(nodes)) / values.max())
    choice = choose_tree(accept, lambda width: draft, verify, 10, 4)
    assert choice.ms_per_token == pytest.approx(expected, rel=1e-12)
    assert choice.ms_per_token == pytest.approx((choice.draft_ms + choice.verify_ms) / choice.tree.value)
    assert len(choice.tree.parents) == choice.budget and choice.depth == choice.tree.depth
    if seed >= 4:
        assert choice.depth == 4


def test_choose_tree_costs_the_width():
    """A wide-forward penalty makes the chosen tree narrower."""
    accept = (0.4, 0.3, 0.2)
    cheap = choose_tree(accept, lambda width: 1.0, lambda n: 10.0 + 0.05 * n, 24, 4)
    dear = choose_tree(accept, lambda width: 1.0 + 4.0 * (width - 1), lambda n: 10.0 + 0.05 * n, 24, 4)
    assert dear.tree.width < cheap.tree.width
    assert dear.draft_ms == pytest.approx(dear.depth * (1.0 + 4.0 * (dear.tree.width - 1)))


def test_choose_tree_skips_refused_budgets():
    choice = choose_tree((0.9,), lambda width: 0.1, lambda n: 1.0 if n <= 3 else math.inf, 16, 8)
    assert choice.budget <= 3
    assert choose_tree((), lambda width: 0.1, lambda n: 1.0, 16, 8) is None


@pytest.mark.parametrize("seed", range(3))
def test_graft_is_the_dp_on_the_extended_vector(seed):
    rng = np.random.default_rng(70 + seed)
    model, retrieved = rank_vector(rng, 2), tuple(0.5 * p for p in rank_vector(rng, 2))
    extended = model + retrieved
    for nodes in range(2, 10):
        graft = graft_tree(model, retrieved, nodes, 3)
        assert graft.tree.value == pytest.approx(brute_force_tree_values(extended, nodes, 3).max(), rel=1e-12)
        assert graft.retrieved == sum(1 for rank in graft.tree.ranks[1:] if rank >= 2)
        assert graft.tree.value >= best_tree(model, nodes, 3).value - 1e-12


def test_graft_uses_strong_retrieval():
    graft = graft_tree((0.3,), (0.6,), budget=3, depth=1)
    assert graft.retrieved == 1 and graft.tree.value == pytest.approx(1.9)
    none = graft_tree((0.6, 0.3), (0.0,), budget=3, depth=2)
    assert none.retrieved == 0


def test_memoised_depth_and_width_match_the_rebuilt_tree():
    """choose_tree's cheap (depth, width) of every DP tree equals the rebuilt tree's."""
    import random

    from specplan.planner.tree_dp import _table_depth_and_width, solve_tree_table, tree_from_table

    rng = random.Random(1)
    for _ in range(20):
        accept = sorted((rng.random() for _ in range(rng.randint(1, 6))), reverse=True)
        accept = [value * 0.95 / max(1.0, sum(accept)) for value in accept]
        table, memo = solve_tree_table(accept, 30, 6), {}
        for budget in range(2, 31):
            for depth in range(1, 7):
                tree = tree_from_table(table, budget, depth)
                if tree is not None:
                    assert _table_depth_and_width(table, budget, depth, memo) == (tree.depth, tree.width)
