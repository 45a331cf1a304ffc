"""The batched runtime's overhead over T(n, b) (planner-math.md section 11.4): measured by running
the runtime, stored in profile.yaml, and added by the planner's batch view."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from specplan.core.errors import ProfileError
from specplan.core.profile import LatencyCurve, load_profile, profile_from_dict, profile_to_dict, save_profile
from specplan.planner.batch import batch_view, overhead_ms
from specplan.planner.schedule import solve_schedule
from specplan.profiler.batch_latency import measure_batch_latency
from specplan.profiler.batch_overhead import batch_prompts, measure_batch_overhead
from specplan.runtime.batched.engine import BatchedEngine
from specplan.runtime.batched.drafters import PerSequenceDrafters
from specplan.runtime.drafters.ngram import NgramDrafter
from tests.planner.test_schedule import OPTIONS, batched_profile
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")
pytestmark = pytest.mark.usefixtures("one_thread")


def _with_overhead(profile, curves):
    return replace(profile, models=(replace(profile.target, batch_overhead=curves), *profile.models[1:]))


def test_the_view_adds_the_overhead_to_the_target_at_that_batch_only():
    profile = _with_overhead(batched_profile(), (LatencyCurve(256, (1, 3), (2.0, 6.0), batch=4),))
    bare, loaded = batch_view(batched_profile(), 4).target.latency[0], batch_view(profile, 4).target.latency[0]
    assert [ms - before for ms, before in zip(loaded.ms, bare.ms)] == pytest.approx([2.0, 4.0, 6.0, 6.0, 6.0])
    assert batch_view(profile, 8).target.latency == batch_view(batched_profile(), 8).target.latency
    assert batch_view(profile, 4).models[1].latency == batch_view(batched_profile(), 4).models[1].latency


def test_a_large_speculative_overhead_moves_the_schedule_to_plain_decoding():
    """Without the overhead the schedule speculates at batch 4; the runtime's cost of a draft row
    there (measured, here set) makes plain decoding the better choice, and the plan says so."""
    options = OPTIONS
    before = {row.batch: row for row in solve_schedule(batched_profile(), options).schedule.rows}
    assert before[4].stages
    heavy = _with_overhead(batched_profile(), (LatencyCurve(256, (1, 2), (0.0, 20.0), batch=4),))
    after = {row.batch: row for row in solve_schedule(heavy, options).schedule.rows}
    assert not after[4].stages
    assert after[2].stages == before[2].stages  # other batches unchanged
    assert after[4].plain_tokens_per_s == pytest.approx(before[4].plain_tokens_per_s)


def test_profiles_carry_the_overhead_and_old_ones_load(tmp_path):
    profile = _with_overhead(batched_profile(), (LatencyCurve(256, (1, 2, 5), (0.5, 1.25, 3.0), batch=4),))
    save_profile(profile, tmp_path / "profile.yaml")
    text = (tmp_path / "profile.yaml").read_text()
    assert text.startswith("schema_version: 2") and "batch_overhead" in text
    loaded = load_profile(tmp_path / "profile.yaml")
    assert loaded.target.batch_overhead == profile.target.batch_overhead
    assert "batch_overhead" not in profile_to_dict(batched_profile())["models"][0]  # none: nothing written
    document = profile_to_dict(profile)
    document["models"][0]["batch_overhead"][0]["ms"][1] = -1.0
    with pytest.raises(ProfileError, match="batch_overhead.ms"):
        profile_from_dict(document)
    document["models"][0]["batch_overhead"][0]["ms"][1] = 1.0
    document["schema_version"] = 1
    with pytest.raises(ProfileError):
        profile_from_dict(document)


def test_overhead_is_interpolated_and_held_at_the_ends():
    curve = LatencyCurve(256, (1, 2, 5), (0.5, 1.0, 4.0), batch=2)
    assert [overhead_ms(curve, n) for n in (1, 2, 3, 5, 9)] == pytest.approx([0.5, 1.0, 2.0, 4.0, 4.0])


def test_the_runtime_reports_each_verify_forward_width():
    model = tiny_llama()
    prompts = [[1, 2, 3, 1, 2, 3, 1, 2], [5, 6, 7, 5, 6, 7, 5]]
    result = BatchedEngine(model, CPU, set(), PerSequenceDrafters(lambda: NgramDrafter(3)), 3).generate(prompts, 12)
    assert len(result.verify_widths) == result.rounds
    assert all(1 <= width <= 4 for width in result.verify_widths) and max(result.verify_widths) > 1
    plain = BatchedEngine(model, CPU, set()).generate(prompts, 6)
    assert plain.verify_widths == (1,) * plain.rounds


def test_the_profiler_measures_an_overhead_curve_on_a_tiny_model():
    model = tiny_llama()
    context = [int(t) for t in torch.arange(40) % 90]
    prompts = [[3, 4, 5, 3, 4, 5], [7, 8, 9, 7, 8], [11, 12, 11, 12]]
    curve = measure_batch_latency(model, CPU, context, 3, (1, 2, 4, 8), repeats=2)
    overhead = measure_batch_overhead(model, CPU, context, prompts, curve, gammas=(0, 2, 4))
    assert overhead.batch == 3 and overhead.context == curve.context
    assert overhead.n[0] == 1 and list(overhead.n) == sorted(set(overhead.n)) and len(overhead.n) >= 2
    assert all(ms >= 0.0 for ms in overhead.ms)


def test_batch_prompts_are_context_long_and_differ_at_their_ends():
    rows = batch_prompts(list(range(10)), [[50, 51], [60]], 4)
    assert all(len(row) == 10 for row in rows)
    assert [row[-1] for row in rows] == [51, 60, 51, 60]

