"""HSD hierarchy DP against brute force over every chain and every gamma (<= 5 models)."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from tests.planner.planner_instances import plain_latency, random_profile, reference_chain_cost, with_histograms
from specplan.core.plan import Stage, StageShape
from specplan.planner import PlanOptions, solve_plan
from specplan.planner.tree_dp import choose_tree


def tree_stage(profile, drafter, verifier, options):
    """The Sequoia tree of a pair (its own brute-force test is in test_tree_dp.py)."""
    entry = profile.acceptance_for(drafter, verifier, options.temperature)
    store = profile.retrieval_entry(drafter)
    accept = entry.rank_accept  # retrieval_rank_accept is for grafts (test_graft_planning.py)
    call = (lambda width: store.ms_per_call) if store else (lambda width: plain_latency(profile, drafter, width))
    choice = choose_tree(accept, call, lambda n: plain_latency(profile, verifier, n), options.max_budget,
                         options.max_depth)
    if choice is None:
        return None
    shape = StageShape("tree", budget=choice.budget, depth=choice.depth, parents=choice.tree.parents)
    return Stage(drafter, verifier, shape)


def bottom_stages(profile, drafter, verifier, options):
    if profile.acceptance_for(drafter, verifier, options.temperature) is None:
        return []
    stages = []
    if "sequence" in options.shapes:
        stages += [Stage(drafter, verifier, StageShape("sequence", gamma=g)) for g in options.gammas]
    if "tree" in options.shapes:
        tree = tree_stage(profile, drafter, verifier, options)
        stages += [tree] if tree is not None else []
    return stages


def every_chain(profile, options):
    """Every chain bottom drafter -> middle models (increasing T(1)) -> target, every gamma."""
    order = sorted(profile.models, key=lambda m: (m.latency[0].ms[0], m.role == "target", m.id))
    ids = [m.id for m in order]
    target = profile.target.id
    below = ids[: ids.index(target)]
    yield ()
    for count in range(1, options.max_stages + 1):
        for middles in itertools.combinations(below, count - 1):
            verifiers = list(middles) + [target]
            first = verifiers[0]
            drafters = below[: below.index(first)] if first != target else below
            for drafter in list(drafters) + [r.id for r in profile.retrieval]:
                for bottom in bottom_stages(profile, drafter, first, options):
                    upper_pairs = list(zip(verifiers, verifiers[1:]))
                    if any(profile.acceptance_for(d, v, 0.0) is None for d, v in upper_pairs):
                        continue
                    if upper_pairs and "sequence" not in options.shapes:
                        continue
                    for gammas in itertools.product(options.gammas, repeat=len(upper_pairs)):
                        upper = tuple(Stage(d, v, StageShape("sequence", gamma=g))
                                      for (d, v), g in zip(upper_pairs, gammas))
                        yield (bottom,) + upper


def brute_force(profile, options):
    """(best closed-form ms per token, its chain) over every chain."""
    return min(((reference_chain_cost(profile, chain), chain) for chain in every_chain(profile, options)),
               key=lambda pair: pair[0])


def solve(profile, options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return solve_plan(profile, options)


CASES = [
    # (models, retrieval, max_stages, shapes, density)
    (2, 0, 1, ("sequence",), 1.0),
    (3, 0, 2, ("sequence",), 1.0),
    (4, 1, 3, ("sequence",), 0.8),
    (5, 0, 4, ("sequence",), 1.0),
    (5, 1, 3, ("sequence",), 0.7),
    (3, 1, 2, ("sequence", "tree"), 1.0),
    (4, 1, 3, ("sequence", "tree"), 0.8),
    (5, 1, 2, ("tree",), 1.0),
    (5, 1, 3, ("sequence", "tree"), 0.6),
]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case[0]}m{case[1]}r{case[2]}s-{'+'.join(case[3])}-{case[4]}")
def test_dp_equals_brute_force(case, seed):
    models, retrieval, max_stages, shapes, density = case
    rng = np.random.default_rng(seed * 100 + models * 10 + max_stages)
    profile = with_histograms(random_profile(rng, models, retrieval, rank_width=3, pair_density=density), rng)
    options = PlanOptions(max_budget=10, max_depth=4, gammas=(1, 2, 3, 5, 8), shapes=shapes, max_stages=max_stages)
    expected, chain = brute_force(profile, options)
    result = solve(profile, options)
    assert result.values[profile.target.id] == pytest.approx(expected, rel=1e-9)
    assert result.plan.predicted.ms_per_token == pytest.approx(expected, rel=1e-9)
    assert reference_chain_cost(profile, result.plan.stages) == pytest.approx(expected, rel=1e-9), (
        f"the plan does not attain the optimum; brute force found {chain}"
    )
    assert len(result.plan.stages) <= max_stages


@pytest.mark.parametrize("seed", range(4))
def test_middle_model_values_are_their_own_optima(seed):
    """L*(i) for a middle model equals the brute force with that model as the target."""
    rng = np.random.default_rng(seed)
    profile = random_profile(rng, 4, 1, pair_density=1.0)
    options = PlanOptions(max_budget=8, max_depth=3, gammas=(1, 2, 4), max_stages=3)
    result = solve(profile, options)
    for model in profile.models:
        if model.id not in result.values or model.role == "target":
            continue
        from specplan.core.profile import ModelEntry, Profile

        demoted = tuple(ModelEntry(m.id, m.source, m.fingerprint, role="target" if m.id == model.id else "drafter",
                                   latency=m.latency) for m in profile.models)
        sub = Profile(profile.device, demoted, profile.acceptance, profile.retrieval)
        expected, _ = brute_force(sub, options)
        assert result.values[model.id] == pytest.approx(expected, rel=1e-9)


def test_tree_to_sequence_wins_when_the_target_is_wide_expensive():
    """SpecMQuant's design: a tree verified by a middle model, then a sequence to a target whose
    T(n) grows steeply with n (4-bit dequantisation), is chosen by the DP by itself."""
    from specplan.core.profile import AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile

    n = tuple(range(1, 41))
    target = ModelEntry("target-nf4", "default", "fp", quant="nf4", role="target",
                        latency=(LatencyCurve(256, n, tuple(30.0 + 6.0 * (k - 1) ** 1.5 for k in n)),))
    middle = ModelEntry("middle", "model:m", "fp", latency=(LatencyCurve(256, n, tuple(8.0 + 0.02 * k for k in n)),))
    small = ModelEntry("small", "model:s", "fp", latency=(LatencyCurve(256, n, tuple(1.0 + 0.01 * k for k in n)),))
    acceptance = (
        AcceptanceEntry("small", "middle", 0.0, 0.55, 8, rank_accept=(0.55, 0.15, 0.08, 0.05)),
        AcceptanceEntry("small", "target-nf4", 0.0, 0.5, 8, rank_accept=(0.5, 0.15, 0.08, 0.05)),
        AcceptanceEntry("middle", "target-nf4", 0.0, 0.9, 8, rank_accept=(0.9, 0.05)),
    )
    profile = Profile(DeviceInfo("cuda", "gpu", "h100"), (target, middle, small), acceptance)
    result = solve(profile, PlanOptions(max_budget=32, max_depth=6))
    kinds = [(s.drafter, s.verifier, s.shape.kind) for s in result.plan.stages]
    assert kinds == [("small", "middle", "tree"), ("middle", "target-nf4", "sequence")]
    assert math.isclose(result.plan.predicted.ms_per_token, brute_force(profile, PlanOptions(max_budget=32, max_depth=6))[0],
                        rel_tol=1e-9)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("case", [case for case in CASES if case[2] >= 2],
                         ids=lambda case: f"{case[0]}m{case[1]}r{case[2]}s-{'+'.join(case[3])}")
def test_best_chain_of_each_length_equals_brute_force(case, seed):
    """The candidates list the best chain of every length (what ``plan --stages s`` picks), even
    when a shorter chain is faster overall."""
    models, retrieval, max_stages, shapes, density = case
    rng = np.random.default_rng(seed * 7 + models)
    profile = with_histograms(random_profile(rng, models, retrieval, rank_width=3, pair_density=density), rng)
    options = PlanOptions(max_budget=10, max_depth=4, gammas=(1, 2, 3, 5), shapes=shapes, max_stages=max_stages)
    result = solve(profile, options)
    for length in range(2, max_stages + 1):
        costs = [reference_chain_cost(profile, chain) for chain in every_chain(profile, options) if len(chain) == length]
        listed = [row for row in result.candidates if len(row.stages) == length]
        if not costs:
            assert not listed
            continue
        best = min(listed, key=lambda row: row.ms_per_token)
        assert best.ms_per_token == pytest.approx(min(costs), rel=1e-9)
        assert reference_chain_cost(profile, best.stages) == pytest.approx(min(costs), rel=1e-9)
