"""Bad input: missing data is skipped with a warning naming it; unusable values are rejected."""

from __future__ import annotations

import math

import pytest

from tests.planner.planner_instances import linear_curve
from specplan.core.errors import PlanError
from specplan.planner import NoCandidatesError, PlannerInputError, PlannerWarning, PlanOptions, solve_plan
from specplan.core.profile import AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry

DEVICE = DeviceInfo("cpu", "cpu", "cpu")


def models(drafter_latency=True, target_latency=True):
    return (
        ModelEntry("target", "default", "fp", role="target", latency=(linear_curve(50.0, 1.0),) if target_latency else ()),
        ModelEntry("fast", "model:fast", "fp", latency=(linear_curve(2.0, 0.1),)),
        ModelEntry("nolat", "model:nolat", "fp", latency=(linear_curve(3.0, 0.1),) if drafter_latency else ()),
    )


def entry(drafter, alpha=0.7, rank=(0.6, 0.1), retrieval=()):
    return AcceptanceEntry(drafter, "target", 0.0, alpha, 8, rank_accept=rank, retrieval_rank_accept=retrieval)


def test_missing_latency_is_skipped_with_a_warning():
    profile = Profile(DEVICE, models(drafter_latency=False), (entry("fast"), entry("nolat")))
    with pytest.warns(PlannerWarning, match="nolat"):
        result = solve_plan(profile, PlanOptions(max_budget=8, max_depth=3))
    assert any("nolat" in message for message in result.warnings)
    assert all(stage.drafter != "nolat" for stage in result.plan.stages)
    assert result.plan.stages


def test_missing_acceptance_is_skipped_with_a_warning():
    profile = Profile(DEVICE, models(), (entry("fast"),), (RetrievalEntry("ngram-3", "ngram:3", 0.05),))
    with pytest.warns(PlannerWarning) as caught:
        result = solve_plan(profile, PlanOptions(max_budget=8, max_depth=3, max_stages=1))
    text = " ".join(str(w.message) for w in caught)
    assert "nolat -> target" in text and "ngram-3 -> target" in text
    assert result.plan.stages[-1].drafter == "fast"


def test_missing_rank_accept_skips_only_the_tree():
    profile = Profile(DEVICE, models(), (entry("fast", rank=()), entry("nolat")))
    with pytest.warns(PlannerWarning, match="fast -> target has no rank_accept"):
        result = solve_plan(profile, PlanOptions(max_budget=8, max_depth=3, max_stages=1))
    assert not any(c.stages and c.stages[0].drafter == "fast" and c.stages[0].shape.kind == "tree"
                   for c in result.candidates)


def test_no_candidates_is_a_plan_error():
    profile = Profile(DEVICE, models(target_latency=False), (entry("fast"),))
    with pytest.warns(PlannerWarning, match="target"), pytest.raises(NoCandidatesError) as error:
        solve_plan(profile)
    assert isinstance(error.value, PlanError) and "\n" not in str(error.value)


def test_no_drafters_gives_plain_decoding():
    profile = Profile(DEVICE, models()[:1], ())
    result = solve_plan(profile)
    assert result.plan.stages == () and result.plan.predicted.speedup == 1.0


@pytest.mark.parametrize("field, value", [
    ("alpha", math.nan), ("alpha", -0.1), ("alpha", 1.5),
    ("rank", (0.5, math.nan)), ("rank", (-0.2,)), ("rank", (1.2,)),
    ("retrieval", (2.0,)),
])
def test_bad_probabilities_are_rejected(field, value):
    kwargs = {"alpha": 0.7}
    kwargs[field] = value
    profile = Profile(DEVICE, models(), (entry("fast", **kwargs),))
    with pytest.raises(PlannerInputError, match="probability"):
        solve_plan(profile)


@pytest.mark.parametrize("curve", [
    LatencyCurve(256, (1, 2), (5.0, math.nan)),
    LatencyCurve(256, (1, 2), (5.0, -1.0)),
    LatencyCurve(256, (2, 1), (5.0, 6.0)),
    LatencyCurve(256, (1, 2), (5.0,)),
])
def test_bad_latency_is_rejected(curve):
    bad = ModelEntry("fast", "model:fast", "fp", latency=(curve,))
    profile = Profile(DEVICE, (models()[0], bad), (entry("fast"),))
    with pytest.raises(PlannerInputError):
        solve_plan(profile)


def test_bad_histogram_and_retrieval_cost_are_rejected():
    hist = AcceptanceEntry("fast", "target", 0.0, 0.5, 2, (1, -1, 2))
    with pytest.raises(PlannerInputError, match="negative"):
        solve_plan(Profile(DEVICE, models(), (hist,)))
    with pytest.raises(PlannerInputError, match="ms_per_call"):
        solve_plan(Profile(DEVICE, models(), (), (RetrievalEntry("ngram", "ngram:3", math.nan),)))


@pytest.mark.parametrize("kwargs", [
    {"max_budget": 0}, {"max_depth": 0}, {"gammas": ()}, {"gammas": (0, 1)}, {"shapes": ("cube",)},
    {"shapes": ()}, {"max_stages": -1}, {"temperature": -1.0}, {"temperature": math.nan},
])
def test_bad_options_are_rejected(kwargs):
    with pytest.raises(PlannerInputError):
        PlanOptions(**kwargs)


def test_extrapolated_latency_is_flagged_and_far_extrapolation_refused():
    short = (LatencyCurve(256, (1, 2, 4), (50.0, 50.5, 51.0)),)
    target = ModelEntry("target", "default", "fp", role="target", latency=short)
    profile = Profile(DEVICE, (target, models()[1]), (entry("fast", alpha=0.99),))
    with pytest.warns(PlannerWarning, match="extrapolated"):
        result = solve_plan(profile, PlanOptions(shapes=("sequence",), max_stages=1))
    gammas = {c.stages[0].shape.gamma for c in result.candidates if c.stages}
    assert gammas == set(range(1, 8))  # gamma 8 needs T(9) > 2 * 4: refused
    assert result.candidates[0].extrapolated and result.plan.stages[0].shape.gamma > 3
