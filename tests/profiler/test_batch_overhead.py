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
from specplan.runtime.batcher import generate_together
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.torch_shared import SharedNetworks
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


def test_sequences_decoded_together_log_each_forward_width():
    """The shared batch logs every forward's width (its widest row): the prompts' prefill, then chains of
    up to gamma + 1 tokens, or one token a forward for plain decoding; fewer forwards than the sequences'
    rounds together (their rounds shared each forward)."""
    model = tiny_llama()
    prompts = [[1, 2, 3, 1, 2, 3, 1, 2], [5, 6, 7, 5, 6, 7, 5]]
    for gamma, widest in ((3, 4), (0, 1)):
        networks = SharedNetworks(2)
        networks.shared(model).log = []
        engines = [SpeculativeEngine(networks.session(model), CPU, set(), NgramDrafter(3) if gamma else None,
                                     gamma=gamma) for _ in prompts]
        result = generate_together(networks.batcher, engines, prompts, 12, [SamplingConfig()] * 2)
        widths = [width for _, width, _ in networks.shared(model).log]
        assert widths[0] == 7 and all(1 <= width <= widest for width in widths[1:])  # the prefill: all but the last
        assert (max(widths[1:]) > 1) == (gamma > 0)
        assert len(widths) - 1 <= sum(sequence.target_forwards for sequence in result.sequences)
        assert len(widths) - 1 >= max(sequence.target_forwards for sequence in result.sequences)


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

