"""The schedule per batch size: the solver at every T(n, b) against a brute-force
goodput, the crossover batch, plan.yaml's `schedule` key and the CLI table."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from specplan.cli.main import main
from specplan.core.errors import PlanError
from specplan.core.plan import load_plan, plan_from_dict, plan_to_dict, save_plan
from specplan.core.profile import AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile, save_profile
from specplan.planner import explain_schedule
from specplan.planner.options import PlanOptions
from specplan.planner.schedule import solve_schedule, with_schedule
from specplan.planner.sequence import expected_accepted_length
from specplan.planner.hardware.sku import get_sku
from specplan.planner.hardware.sku_plans import plan_for_sku, sku_batches
from specplan.planner.solve import solve_plan

WIDTHS = (1, 2, 4, 8, 16)
BATCHES = (1, 2, 4, 8, 16, 32, 64)
ALPHA = 0.7


def _curves(fixed: float, per_row: float) -> tuple[LatencyCurve, ...]:
    """T(n, b) = fixed + per_row * b * n: a weight read, then work per token row (linear, so exact)."""
    return tuple(LatencyCurve(256, WIDTHS, tuple(fixed + per_row * b * n for n in WIDTHS), batch=b) for b in BATCHES)


def _target_ms(b: int, n: int) -> float:
    return 10.0 + 0.5 * b * n


def _draft_ms(b: int) -> float:
    return 2.0 + 0.05 * b


def batched_profile() -> Profile:
    target = ModelEntry("target", "model:t", "", role="target", latency=_curves(10.0, 0.5))
    small = ModelEntry("small", "model:s", "", latency=_curves(2.0, 0.05))
    entry = AcceptanceEntry("small", "target", 0.0, ALPHA, 4)  # no histogram: E(gamma) from alpha
    return Profile(DeviceInfo("cpu", "test", "cpu"), (target, small), (entry,))


OPTIONS = PlanOptions(gammas=(1, 2, 3, 4), shapes=("sequence",), max_stages=1)


def _brute_force(b: int) -> tuple[int, float]:
    """(best gamma or 0 for plain, ms per token) at batch b, from the formula of planner-math 11.2."""
    best = (0, _target_ms(b, 1))
    for gamma in OPTIONS.gammas:
        ms = (gamma * _draft_ms(b) + _target_ms(b, gamma + 1)) / expected_accepted_length(gamma, ALPHA)
        best = min(best, (gamma, ms), key=lambda pair: pair[1])
    return best


def test_each_row_is_the_brute_force_goodput():
    result = solve_schedule(batched_profile(), OPTIONS)
    rows = result.schedule.rows
    assert [row.batch for row in rows] == list(BATCHES)
    for row in rows:
        gamma, ms = _brute_force(row.batch)
        assert row.ms_per_token == pytest.approx(ms)
        assert row.tokens_per_s == pytest.approx(row.batch * 1000.0 / ms)
        assert row.plain_tokens_per_s == pytest.approx(row.batch * 1000.0 / _target_ms(row.batch, 1))
        assert (row.stages[0].shape.gamma if row.stages else 0) == gamma


def test_crossover_is_where_plain_decoding_starts_to_win():
    expected = min(b for b in BATCHES if all(_brute_force(larger)[0] == 0 for larger in BATCHES if larger >= b))
    assert 1 < expected < BATCHES[-1]  # the instance has a crossover inside the range
    result = solve_schedule(batched_profile(), OPTIONS)
    assert result.schedule.crossover_batch == expected
    assert all(row.stages for row in result.schedule.rows if row.batch < expected)


def test_batch_one_row_is_the_plan_and_the_plan_is_costed_at_every_batch():
    profile = batched_profile()
    plan = solve_plan(profile, OPTIONS).plan
    planned, result = with_schedule(plan, profile, OPTIONS)
    first = planned.schedule.rows[0]
    assert first.stages == plan.stages and first.ms_per_token == pytest.approx(plan.predicted.ms_per_token)
    gamma = plan.stages[0].shape.gamma
    for row in planned.schedule.rows:  # the batch-1 plan's gamma, run at batch b
        ms = (gamma * _draft_ms(row.batch) + _target_ms(row.batch, gamma + 1)) / expected_accepted_length(gamma, ALPHA)
        assert row.plan_tokens_per_s == pytest.approx(row.batch * 1000.0 / ms)
        assert row.tokens_per_s >= row.plan_tokens_per_s - 1e-9


def test_a_model_without_a_curve_at_a_batch_is_left_out_there():
    profile = batched_profile()
    small = profile.model("small")
    profile = replace(profile, models=(profile.target, replace(small, latency=small.latency[:1])))
    result = solve_schedule(profile, OPTIONS)
    assert result.schedule.rows[0].stages and not any(row.stages for row in result.schedule.rows[1:])
    assert any("small" in message for message in result.messages)


def test_a_schedule_asks_only_for_measured_batches():
    with pytest.raises(ValueError, match="no target latency at batch 3"):
        solve_schedule(batched_profile(), OPTIONS, batches=(1, 3))
    assert [row.batch for row in solve_schedule(batched_profile(), OPTIONS, batches=(1, 8)).schedule.rows] == [1, 8]


def test_plan_round_trips_with_its_schedule_and_old_plans_load(tmp_path):
    profile = batched_profile()
    plan, _ = with_schedule(solve_plan(profile, OPTIONS).plan, profile, OPTIONS)
    save_plan(plan, tmp_path / "plan.yaml")
    again = load_plan(tmp_path / "plan.yaml")
    assert again.schedule.crossover_batch == plan.schedule.crossover_batch
    assert [r.stages for r in again.schedule.rows] == [r.stages for r in plan.schedule.rows]
    assert "schedule:" in (tmp_path / "plan.yaml").read_text()
    for stored in sorted((Path(__file__).resolve().parents[2] / "profiles").glob("*/plan*.yaml")):
        scheduled = stored.parent.name.endswith("-batched")  # solved from a profile with T(n, b)
        assert (load_plan(stored).schedule is not None) == scheduled, stored


@pytest.mark.parametrize("edit, fragment", [
    (lambda s: s.update(schema_version=2), "schedule has schema_version 2"),
    (lambda s: s["rows"].reverse(), "strictly increasing"),
    (lambda s: s.update(crossover_batch=3), "not one of its batches"),
    (lambda s: s["rows"][0].update(batch=0), "whole number"),
    (lambda s: s["rows"][0]["stages"][0].update(verifier="small"), "must name the same model"),
])
def test_a_bad_schedule_is_refused(edit, fragment):
    profile = batched_profile()
    plan, _ = with_schedule(solve_plan(profile, OPTIONS).plan, profile, OPTIONS)
    document = plan_to_dict(plan)
    edit(document["schedule"])
    with pytest.raises(PlanError, match=fragment):
        plan_from_dict(document)


def test_plan_explain_prints_the_table(tmp_path, capsys):
    save_profile(batched_profile(), tmp_path / "profile.yaml")
    assert main(["plan", str(tmp_path / "profile.yaml"), "--explain", "--max-budget", "8", "--max-depth", "4"]) == 0
    out = capsys.readouterr().out
    assert "schedule by batch size" in out and "crossover: plain decoding wins from batch" in out
    assert load_plan(tmp_path / "plan.yaml").schedule is not None
    code = main(["plan", str(tmp_path / "profile.yaml"), "--batch-sizes", "1,3", "-o", str(tmp_path / "p3.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "batch 3" in err


def test_a_batch_one_profile_gets_no_schedule(stored, capsys):
    assert main(["plan", "profile.yaml", "-o", "again.yaml"]) == 0
    assert load_plan(stored / "again.yaml").schedule is None


@pytest.mark.parametrize("sku", ["a100-80gb", "h100-sxm", "l4"])
def test_sku_schedules_have_a_crossover(sku, stored):
    from specplan.core.profile import load_profile

    profile = load_profile(stored / "profile.yaml")
    device = get_sku(sku)
    options = PlanOptions(max_budget=16, max_depth=4, gammas=(1, 2, 3, 4))
    batches = sku_batches(profile, device, options, (1, 4, 16, 64))
    row = plan_for_sku(profile, device, options, batches=batches)
    plan = row.result.plan
    assert [r.batch for r in plan.schedule.rows] == list(batches) and plan.schedule.source == "roofline"
    assert plan.schedule.rows[0].stages == plan.stages
    goodputs = [r.plain_tokens_per_s for r in plan.schedule.rows]
    assert goodputs == sorted(goodputs)  # the weights are read once per forward: plain goodput grows with b


def test_sku_batches_stop_at_memory():
    from specplan.planner.hardware.sku import BUILTIN_SHAPES

    profile = batched_profile()
    profile = replace(profile, models=tuple(replace(m, shape=BUILTIN_SHAPES["default"], dtype="bfloat16")
                                            for m in profile.models))
    # 0.5 GB - 134.5M bf16 weights = 0.231 GB; a KV cache of 256 + 64 positions (the largest T(n) read):
    # 30 * 2 * 3 * 64 * 320 * 2 bytes = 7.37 MB, so 31 sequences fit
    tiny = replace(get_sku("l4"), memory_gb=0.5)
    assert sku_batches(profile, tiny, OPTIONS) == (1, 2, 4, 8, 16)
    assert sku_batches(profile, get_sku("h200"), OPTIONS)[-1] == 256


def test_schedule_table_has_a_row_per_batch():
    text = explain_schedule.schedule_table(solve_schedule(batched_profile(), OPTIONS).schedule)
    assert text.splitlines()[1].split()[0] == "batch" and len(text.splitlines()) == 3 + len(BATCHES)
