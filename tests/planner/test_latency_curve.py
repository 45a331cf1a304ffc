"""T(n) interpolation: exact at profiled n, linear between, flagged beyond, refused far beyond."""

from __future__ import annotations

import math

import pytest

from specplan.planner.latency import interpolate, latency_table, nearest_curve
from specplan.profile import LatencyCurve, ModelEntry

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
