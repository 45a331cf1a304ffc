"""The planner's floor (docs/planner-math.md section 9.1): a plan keeps a draft only where it is
predicted faster than the engine's own plain decoding, and says in one line why it is plain."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specplan.core.profile import AcceptanceEntry, DeviceInfo, ModelEntry, Profile, RetrievalEntry
from specplan.planner.solve import PlanOptions, solve_plan
from tests.planner.planner_instances import linear_curve


def lookup_profile(engine_plain_ms: float, numerics: str = "exact") -> Profile:
    """A llama.cpp target (T(1) 20 ms) and an n-gram lookup accepted often enough to beat T(1)."""
    target = ModelEntry("target", "default", "fp", role="target", latency=(linear_curve(20.0, 1.0),),
                        engine_plain_ms=engine_plain_ms)
    lookup = RetrievalEntry("ngram-3", "ngram:3", 0.05)
    entry = AcceptanceEntry("ngram-3", "target", 0.0, 0.6, 8, rank_accept=(0.5, 0.1))
    return Profile(DeviceInfo("cpu", "test cpu", "cpu", source="llama.cpp", numerics=numerics), (target,), (entry,), (lookup,))


def test_a_draft_that_beats_plain_but_not_the_engine_leaves_the_plan_plain():
    fast_engine = solve_plan(lookup_profile(engine_plain_ms=5.0), PlanOptions(max_budget=8, max_depth=4)).plan
    assert fast_engine.stages == ()
    assert fast_engine.solver["floor"] == {"name": "llama.cpp's own plain decoding", "ms_per_token": 5.0}
    reason = fast_engine.solver["plain_reason"]
    assert "ngram-3 -> target" in reason and "not below 5.00" in reason and "\n" not in reason


def test_a_draft_that_beats_the_engine_is_kept():
    slow_engine = solve_plan(lookup_profile(engine_plain_ms=20.0), PlanOptions(max_budget=8, max_depth=4)).plan
    assert slow_engine.stages and slow_engine.predicted.ms_per_token < 20.0
    assert "plain_reason" not in slow_engine.solver


@pytest.mark.parametrize("numerics, name", [("fast", "llama.cpp's own plain decoding"), ("exact", "plain decoding")])
def test_without_a_measured_engine_the_floor_is_t1(numerics, name):
    plan = solve_plan(lookup_profile(engine_plain_ms=0.0, numerics=numerics), PlanOptions(max_budget=8, max_depth=4)).plan
    assert plan.solver["floor"] == {"name": name, "ms_per_token": 20.0}


def test_the_floor_survives_the_profile_round_trip(tmp_path):
    from specplan.core.profile import load_profile, save_profile

    profile = lookup_profile(engine_plain_ms=7.25)
    save_profile(profile, tmp_path / "profile.yaml")
    assert load_profile(tmp_path / "profile.yaml").target.engine_plain_ms == 7.25
    save_profile(replace(profile, models=(replace(profile.target, engine_plain_ms=0.0),)), tmp_path / "old.yaml")
    assert "engine_plain_ms" not in (tmp_path / "old.yaml").read_text()  # profiles without it read as before


def test_a_lookup_within_the_tie_of_the_floor_is_kept_for_specplans_runtime_only():
    """Section 9.3: where plain decoding wins by less than LOOKUP_TIE, a lookup chain is kept (with the reason in
    one line) for specplan's guarded runtime; an export's solve (``lookup_at_tie`` off) and a floor further below
    the lookup keep plain decoding."""
    from specplan.planner.solve import LOOKUP_TIE

    options = PlanOptions(max_budget=8, max_depth=4, shapes=("sequence",), max_stages=1)
    lookup_ms = solve_plan(lookup_profile(engine_plain_ms=20.0), options).plan.predicted.ms_per_token
    near = lookup_profile(engine_plain_ms=lookup_ms / (1.0 + LOOKUP_TIE / 2))
    kept = solve_plan(near, replace(options, lookup_at_tie=True)).plan
    assert kept.stages and kept.stages[0].drafter == "ngram-3" and kept.predicted.ms_per_token == lookup_ms
    assert "within 2%" in kept.solver["lookup_at_tie"] and "\n" not in kept.solver["lookup_at_tie"]
    assert "plain_reason" not in kept.solver
    assert solve_plan(near, options).plan.stages == ()  # an export's solve
    far = lookup_profile(engine_plain_ms=lookup_ms / (1.0 + 2 * LOOKUP_TIE))
    assert solve_plan(far, replace(options, lookup_at_tie=True)).plan.stages == ()
