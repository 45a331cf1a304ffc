"""Posterior acceptance and the re-solve of an adaptive plan (docs/planner-math.md section 12)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specplan.core.errors import PlanError
from specplan.core.plan import load_plan, plan_from_dict, plan_to_dict, save_plan
from specplan.core.profile import AcceptanceEntry
from specplan.planner import posterior
from specplan.planner.posterior import LiveCounts, posterior_entry
from specplan.planner.replan import Replanner
from specplan.planner.sequence import expected_accepted
from specplan.planner.tree_dp import tree_value

STORED = Path(__file__).resolve().parents[2] / "profiles" / "cpu"


def test_without_data_the_posterior_is_the_profiles_acceptance(solved):
    profile, _ = solved
    for entry in profile.acceptance:
        after = posterior_entry(entry, LiveCounts(), 16.0)
        assert after.alpha == pytest.approx(entry.alpha, abs=1e-6)
        assert after.rank_accept == entry.rank_accept
        for gamma in range(1, 9):
            assert expected_accepted(after, gamma) == pytest.approx(expected_accepted(entry, gamma))


def test_the_posterior_moves_toward_the_data_and_the_prior_weight_sets_how_fast():
    entry = AcceptanceEntry("d", "t", 0.0, 0.2, 8, (8, 2, 0, 0, 0, 0, 0, 0, 0), (0.2, 0.1), (), 10)
    perfect = LiveCounts((0,) * 8 + (5,), (), (10, 0), 10)
    light, heavy = posterior_entry(entry, perfect, 4.0), posterior_entry(entry, perfect, 400.0)
    assert entry.alpha < heavy.alpha < light.alpha < 1.0
    assert entry.rank_accept[0] < heavy.rank_accept[0] < light.rank_accept[0] < 1.0
    assert light.rank_accept[0] == pytest.approx((4.0 * 0.2 + 10) / 14.0)
    rejecting = posterior_entry(entry, LiveCounts((50,) + (0,) * 8), 4.0)
    assert rejecting.alpha < entry.alpha


def test_a_censored_round_only_raises_the_buckets_at_or_above_its_length():
    entry = AcceptanceEntry("d", "t", 0.0, 0.5, 3, (4, 2, 1, 1))
    after = posterior.posterior_histogram(entry, LiveCounts((), (0, 0, 6)), 8.0)
    assert after[:2] == (4.0, 2.0)
    assert after[2] == pytest.approx(1 + 3) and after[3] == pytest.approx(1 + 3)


def test_with_the_prior_the_re_solve_predicts_the_plan(solved):
    profile, plan = solved
    planner = Replanner(profile, plan.adaptive)
    entries = {d: posterior_entry(planner.prior(d), LiveCounts(), 16.0) for d in ("ngram-3", "ngram-5", "recycle", "cache")}
    choice = planner.choose(entries)
    assert choice.ms_per_token == pytest.approx(plan.predicted.ms_per_token, rel=0.01)
    assert choice.costs[-1] == pytest.approx(profile.target.latency[0].ms[0])  # plain decoding: T(1)


def test_skewed_acceptance_moves_the_choice_to_the_drafter_that_is_accepted(solved):
    profile, plan = solved
    planner = Replanner(profile, plan.adaptive)
    prior = {d: posterior_entry(planner.prior(d), LiveCounts(), 16.0) for d in ("ngram-3", "ngram-5", "recycle", "cache")}
    before = planner.choose(prior)
    long_chains = LiveCounts((0,) * 8 + (30,), (), (40,) + (0,) * 7, 40)
    skewed = {**prior, "recycle": posterior_entry(planner.prior("recycle"), long_chains, 16.0)}
    after = planner.choose(skewed)
    assert after.stages[-1].drafter == "recycle" and before.stages[-1].drafter != "recycle"
    assert after.ms_per_token < 0.6 * before.ms_per_token
    shape = after.stages[-1].shape  # re-solved: a long chain or a deep tree, not the plan's 2 nodes
    assert shape.gamma >= 4 or (shape.kind == "tree" and tree_value(shape.parents, skewed["recycle"].rank_accept) > 3)
    nothing = {d: posterior_entry(planner.prior(d), LiveCounts((200,) + (0,) * 8, (), (0,) * 8, 200), 1e-3)
               for d in prior}
    costs = planner.choose(nothing).costs  # nothing is accepted: no candidate beats plain decoding by more
    assert min(costs) >= 0.95 * costs[-1]  # than the profile's T(2) < T(1) noise (a 2-node tree is a free forward)


def test_adaptive_plans_round_trip_and_old_plans_load(solved, tmp_path):
    _, plan = solved
    assert plan.adaptive.candidates[0].stages == plan.stages
    assert any(not c.stages for c in plan.adaptive.candidates)  # plain decoding is always a candidate
    save_plan(plan, tmp_path / "plan.yaml")
    loaded = load_plan(tmp_path / "plan.yaml")
    assert [c.stages for c in loaded.adaptive.candidates] == [c.stages for c in plan.adaptive.candidates]
    assert loaded.adaptive.every == plan.adaptive.every and loaded.stages == plan.stages
    save_plan(loaded, tmp_path / "again.yaml")
    assert load_plan(tmp_path / "again.yaml") == loaded
    assert load_plan(STORED / "plan.yaml").adaptive is None


@pytest.mark.parametrize("edit, message", [
    (lambda a: a.update(every=0), "every"),
    (lambda a: a.update(threshold=2.0), "threshold"),
    (lambda a: a.update(candidates=[]), "candidates"),
    (lambda a: a["candidates"][1].update(ms_per_token=-1), "ms_per_token"),
    (lambda a: a["candidates"][1]["stages"][0].update(verifier="layerskip-20"), "target"),
])
def test_a_bad_adaptive_section_is_one_line_saying_what_to_fix(solved, edit, message):
    _, plan = solved
    document = plan_to_dict(plan)
    edit(document["adaptive"])
    with pytest.raises(PlanError, match=message) as caught:
        plan_from_dict(document)
    assert len(str(caught.value).splitlines()) == 1
