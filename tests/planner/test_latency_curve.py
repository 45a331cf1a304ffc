"""T(n) interpolation: exact at profiled n, linear between, flagged beyond, refused far beyond."""

from __future__ import annotations

import math

import pytest

from specplan.planner.latency import interpolate, latency_table, nearest_curve
from specplan.core.profile import LatencyCurve, ModelEntry

CURVE = LatencyCurve(256, (1, 2, 4, 8, 16), (10.0, 10.5, 11.0, 13.0, 17.0))


@pytest.mark.parametrize("n, ms, flagged", [
    (1, 10.0, False), (2, 10.5, False), (3, 10.75, False), (6, 12.0, False), (12, 15.0, False),
    (16, 17.0, False), (17, 17.5, True), (32, 25.0, True), (33, math.inf, True), (64, math.inf, True),
])
def test_interpolate(n, ms, flagged):
    point = interpolate(CURVE, n)
    assert point.ms == pytest.approx(ms) and point.extrapolated is flagged


def test_below_the_profiled_range_is_flagged():
    point = interpolate(LatencyCurve(0, (4, 8), (3.0, 5.0)), 1)
    assert point == type(point)(3.0, True)


def test_extrapolation_never_decreases_and_single_points_are_flat():
    falling = LatencyCurve(0, (1, 2), (5.0, 4.0))
    assert interpolate(falling, 3).ms == 4.0
    assert interpolate(LatencyCurve(0, (1,), (5.0,)), 2).ms == 5.0
    with pytest.raises(ValueError):
        interpolate(CURVE, 0)


def test_nearest_context():
    curves = (LatencyCurve(128, (1,), (1.0,)), LatencyCurve(1024, (1,), (2.0,)), LatencyCurve(4096, (1,), (3.0,)))
    model = ModelEntry("m", "model:m", "fp", latency=curves)
    assert nearest_curve(model, 900).context == 1024
    assert nearest_curve(model, 100000).context == 4096
    assert nearest_curve(model, None).context == 128
    assert nearest_curve(ModelEntry("m", "model:m", "fp"), 256) is None


def test_table_marks_extrapolation():
    table = latency_table(ModelEntry("m", "model:m", "fp", latency=(CURVE,)), 256, 40)
    assert table(6) == pytest.approx(12.0) and table(40) == math.inf and table(100) == math.inf
    assert not table.is_extrapolated(16) and table.is_extrapolated(17)


def test_a_compiled_model_pays_for_the_bucket_its_forward_is_padded_to():
    """runtime/compile/compiled.py pads n new tokens to the next bucket (the profiled widths)."""
    compiled = ModelEntry("target", "default", "fp", role="target", mode="compiled", latency=(CURVE,))
    table = latency_table(compiled, 256, 40)
    assert [table(n) for n in (1, 2, 3, 4, 5, 8, 9, 16)] == [10.0, 10.5, 11.0, 11.0, 13.0, 13.0, 17.0, 17.0]
    assert table(17) == pytest.approx(17.5) and table.is_extrapolated(17)  # eager beyond the largest bucket
    eager = latency_table(ModelEntry("target", "default", "fp", role="target", latency=(CURVE,)), 256, 40)
    assert eager(5) == pytest.approx(11.5)
    head = ModelEntry("head-h", "head:h", "", mode="compiled", latency=(CURVE,))  # a head always runs eagerly
    assert latency_table(head, 256, 40)(5) == pytest.approx(11.5)


def test_the_planner_does_not_pay_for_a_bucket_and_leave_it_half_empty():
    """With a compiled target, a 5..7-node tree costs a forward of 8, so the tree DP takes 8 nodes
    (more nodes never lower F) or falls back to 4, where eagerly interpolated costs allow 5..7."""
    import warnings

    from specplan.planner import PlanOptions, solve_plan
    from specplan.core.profile import AcceptanceEntry, DeviceInfo, Profile, RetrievalEntry

    curve = LatencyCurve(256, (1, 2, 4, 8, 16), (20.0, 20.2, 20.4, 23.0, 28.0))
    budgets = {}
    for mode in ("eager", "compiled"):
        target = ModelEntry("target", "default", "fp", role="target", mode=mode, latency=(curve,))
        entry = AcceptanceEntry("ngram", "target", 0.0, 0.4, 8, rank_accept=(0.4, 0.12, 0.05, 0.02))
        profile = Profile(DeviceInfo("cpu", "test", "cpu"), (target,), (entry,), (RetrievalEntry("ngram", "ngram:3", 0.05),))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plan = solve_plan(profile, PlanOptions(max_budget=16, max_depth=6, shapes=("tree",), max_stages=1)).plan
        budgets[mode] = len(plan.stages[0].shape.parents)
    assert budgets["compiled"] in (1, 2, 4, 8, 16) and budgets["eager"] not in (1, 2, 4, 8, 16)
