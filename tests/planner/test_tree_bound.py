"""The floor that lets a re-solve skip tree budgets (docs/planner-math.md section 12.2): it never
changes the choice, and it does skip work."""

from __future__ import annotations

import random

import pytest

from specplan.planner.posterior import LiveCounts, posterior_entry
from specplan.planner.replan import Replanner
from specplan.planner.tree_bound import budget_cap, most_committed
from specplan.planner.tree_dp import choose_tree, solve_tree_table


@pytest.mark.parametrize("seed", range(30))
def test_the_floor_is_below_every_tree_and_the_capped_dp_finds_the_same_winner(seed):
    rng = random.Random(seed)
    accept = sorted((rng.random() * 0.9 for _ in range(rng.randint(1, 6))), reverse=True)
    slope, base = rng.uniform(0.1, 8.0), rng.uniform(5.0, 50.0)
    verify = lambda n: base + slope * n  # noqa: E731
    table, most = solve_tree_table(accept, 16, 8), most_committed(accept, 16)
    for nodes in range(2, 17):  # F of the best tree of n nodes never exceeds the bound
        assert table.best(nodes, 8) <= most[nodes] + 1e-9
    full = choose_tree(accept, lambda width: 0.5, verify, 16, 8)
    incumbent = full.ms_per_token * rng.uniform(0.9, 1.3)  # sometimes the tree loses, sometimes wins
    cap = budget_cap(accept, verify, incumbent, 16)
    if full.ms_per_token <= incumbent:
        capped = choose_tree(accept, lambda width: 0.5, verify, cap, min(8, cap - 1))
        assert cap >= full.budget
        assert capped.ms_per_token == pytest.approx(full.ms_per_token)
    elif cap >= 2:
        capped = choose_tree(accept, lambda width: 0.5, verify, cap, min(8, cap - 1))
        assert capped.ms_per_token > incumbent


def test_a_tree_that_could_win_is_never_cut():
    accept = [0.9]  # a chain of 16 commits about 8.1 tokens: 26 ms / 8.1 is 3.2 ms a token
    assert budget_cap(accept, lambda n: 10.0 + n, 3.3, 16) == 16
    assert budget_cap(accept, lambda n: 10.0 + n, 1.0, 16) == 1  # nothing commits 12 tokens per round of 2


@pytest.fixture(scope="module")
def replanner(solved):
    profile, plan = solved
    return Replanner(profile, plan.adaptive)


@pytest.mark.parametrize("seed", range(12))
def test_the_pruned_re_solve_chooses_what_the_full_one_does(replanner, seed):
    rng = random.Random(seed)
    entries = {}
    for drafter in ("ngram-3", "ngram-5", "recycle", "cache"):
        prior = replanner.prior(drafter)
        hits = [rng.randint(0, 30) for _ in range(8)]
        rounds = [rng.randint(0, 20) for _ in range(9)]
        entries[drafter] = posterior_entry(prior, LiveCounts(tuple(rounds), (), tuple(hits), sum(hits) + 20), 16.0)
    full = [replanner.cost(candidate, entries) for candidate in replanner.settings.candidates]
    best = min(range(len(full)), key=lambda i: (full[i][0], i))
    keep = rng.randrange(len(full))
    choice = replanner.choose(entries, keep=keep)
    assert choice.index == best
    assert choice.ms_per_token == pytest.approx(full[best][0])
    assert choice.stages == full[best][1]
    assert all(cost >= full[best][0] - 1e-9 for cost in choice.costs)
    # the running candidate: exact whenever the rule keeps it, above the switching line otherwise
    line = full[best][0] / (1 - replanner.settings.margin)
    if full[keep][0] <= line:
        assert choice.costs[keep] == pytest.approx(full[keep][0])
    else:
        assert choice.costs[keep] > line


def test_pruning_skips_budgets_on_the_stored_profile(replanner):
    entries = {d: posterior_entry(replanner.prior(d), LiveCounts(), 16.0) for d in ("ngram-3", "ngram-5", "recycle", "cache")}
    replanner.trees.clear()
    replanner.choose(entries)
    budgets = [budget for budget, _ in replanner.trees.values()]
    assert budgets and max(budgets) < replanner.settings.max_budget  # the steep CPU T(n) caps every tree DP


def test_a_dp_solved_at_a_larger_budget_answers_a_capped_one(replanner, monkeypatch):
    from specplan.planner import replan

    entries = {d: posterior_entry(replanner.prior(d), LiveCounts(), 16.0) for d in ("ngram-3", "ngram-5", "recycle", "cache")}
    replanner.trees.clear()
    full = [replanner.cost(candidate, entries) for candidate in replanner.settings.candidates]  # uncapped DPs
    solved = dict(replanner.trees)
    monkeypatch.setattr(replan, "choose_tree", lambda *args: pytest.fail("re-solved a DP the cache answers"))
    choice = replanner.choose(entries)
    assert replanner.trees == solved
    assert choice.ms_per_token == pytest.approx(min(ms for ms, _ in full))
