"""llama.cpp's T(n, b) read from one sequence's curve (planner/batch.py ``derived_curve``,
docs/planner-math.md section 11.5): a decode of b sequences x n tokens is one forward over b * n rows."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specplan.core.profile import LatencyCurve, load_profile
from specplan.planner.batch import batch_view, derived_curve, scheduled_batches
from specplan.planner.latency import interpolate, padded
from specplan.planner.schedule import solve_schedule

STORED = Path(__file__).resolve().parents[2] / "profiles" / "cpu-qwen-llamacpp-specbench-63" / "profile.yaml"


@pytest.fixture(scope="module")
def llama_profile():
    return load_profile(STORED)


def test_the_derived_curve_is_the_one_sequence_curve_at_b_times_n(llama_profile):
    curve = next(c for c in llama_profile.target.latency if c.batch == 1)
    for batch in (2, 3, 4):
        derived = derived_curve(curve, batch)
        assert derived.batch == batch and derived.source == "derived"
        assert max(derived.n) * batch <= max(curve.n) and derived.n[0] == 1
        for n, ms in zip(derived.n, derived.ms):
            # b * n rows cost what the next profiled width does: llama.cpp's kernels tile rows
            assert ms == pytest.approx(padded(curve, batch * n).ms)
    assert derived_curve(curve, max(curve.n) + 1) is None


def test_a_llama_cpp_profile_is_seen_at_any_batch_its_curve_reaches_and_a_torch_one_only_where_measured(llama_profile):
    view = batch_view(llama_profile, 2)
    assert view.target.latency and view.target.latency[0].ms[0] == pytest.approx(
        interpolate(next(c for c in llama_profile.target.latency if c.batch == 1), 2).ms)
    assert scheduled_batches(llama_profile, (1, 2, 4)) == (1, 2, 4)
    with pytest.raises(ValueError, match="no target latency at batch 65"):
        scheduled_batches(llama_profile, (1, 65))
    torch_profile = replace(llama_profile, device=replace(llama_profile.device, source="measured"))
    assert not batch_view(torch_profile, 2).target.latency
    with pytest.raises(ValueError, match="no target latency at batch 2"):
        scheduled_batches(torch_profile, (1, 2))


def test_a_curve_measured_at_a_batch_is_used_as_measured(llama_profile):
    target = llama_profile.target
    measured = LatencyCurve(256, (1, 2), (1.0, 2.0), batch=2)
    models = tuple(replace(m, latency=m.latency + (measured,)) if m is target else m for m in llama_profile.models)
    view = batch_view(replace(llama_profile, models=models), 2)
    assert view.target.latency == (measured,)


def test_the_schedule_of_a_llama_cpp_profile_costs_each_batch_from_the_derived_curve(llama_profile):
    schedule = solve_schedule(llama_profile, batches=(1, 2, 4)).schedule
    assert [row.batch for row in schedule.rows] == [1, 2, 4]
    curve = next(c for c in llama_profile.target.latency if c.batch == 1)
    for row in schedule.rows:  # plain decoding of b sequences: one forward of b rows per b tokens
        assert row.plain_tokens_per_s == pytest.approx(row.batch * 1000.0 / interpolate(curve, row.batch).ms)


@pytest.mark.parametrize("stored", ["transfer-qwen/plan-specbench", "transfer-qwen/plan-edit",
                                    "transfer-smollm2-xeon/cal-humaneval-edit"])
def test_a_playable_schedule_holds_only_what_the_plans_engine_plays_and_never_predicts_below_the_plan(stored):
    """Batch 1 is the plan; above it plain decoding, the plan, or the plan's drafter as a chain, and a
    speculating row predicts at least the plan's own goodput at its batch wherever the plan can be costed
    there, and the margin over plain decoding that a shared load asks."""
    from specplan.core.contract import load_plan_and_profile
    from specplan.planner.schedule import SHARED_MARGIN, playable_schedule

    plan, profile, _ = load_plan_and_profile(str(STORED.parents[1] / stored / "plan.yaml"))
    schedule = playable_schedule(plan, profile, (1, 2, 4))
    assert schedule.rows[0].stages == plan.stages and schedule.rows[0].batch == 1
    chain = len(plan.stages) == 1 and plan.stages[0].shape.kind == "sequence"
    for row in schedule.rows[1:]:
        assert row.stages in ((), plan.stages) or (chain and len(row.stages) == 1 and
                                                   row.stages[0].drafter == plan.stages[0].drafter and
                                                   row.stages[0].shape.kind == "sequence")
        if row.stages:  # speculation above batch 1 is kept only with a margin over plain decoding
            assert row.tokens_per_s >= row.plan_tokens_per_s * (1 - 1e-9) and row.speedup >= SHARED_MARGIN
        assert row.tokens_per_s >= row.plain_tokens_per_s * (1 - 1e-9)
