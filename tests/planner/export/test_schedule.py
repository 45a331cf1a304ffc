"""Export of the schedule per batch size: vLLM's num_speculative_tokens_per_batch_size
against the recorded SpeculativeConfig, and the stated loss of engines with one setting for all loads."""

from __future__ import annotations

import json
import shlex

import pytest

from specplan.cli.main import main
from specplan.core.plan import save_plan
from specplan.core.profile import AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry, save_profile
from specplan.planner.export.schedule import export_schedule, vllm_schedule_command
from specplan.planner.options import PlanOptions
from specplan.planner.schedule import SHARED_MARGIN, with_schedule
from specplan.planner.sequence import expected_accepted_length
from specplan.planner.solve import solve_plan
from tests.engine_records import load_record, unknown_names

WIDTHS = (1, 2, 4, 8, 16)
BATCHES = (1, 2, 4, 8, 16, 32)
ALPHA, CALL_MS = 0.6, 0.5


def _target_ms(b: int, n: int) -> float:
    return 10.0 + 0.4 * b * n


def ngram_profile() -> Profile:
    curves = tuple(LatencyCurve(256, WIDTHS, tuple(_target_ms(b, n) for n in WIDTHS), batch=b) for b in BATCHES)
    target = ModelEntry("target", "HuggingFaceTB/SmolLM2-135M-Instruct", "", role="target", latency=curves)
    entry = AcceptanceEntry("ngram-3", "target", 0.0, ALPHA, 4)
    return Profile(DeviceInfo("cuda", "test", "h100-sxm"), (target,), (entry,), (RetrievalEntry("ngram-3", "ngram:3", CALL_MS),))


OPTIONS = PlanOptions(max_budget=8, max_depth=4, gammas=(1, 2, 3, 4), shapes=("sequence",), max_stages=1)


def _best_gamma(b: int, margin: float = SHARED_MARGIN) -> int:
    """The brute-force chain length at batch b (0: plain decoding), lookups costing b x CALL_MS; above batch 1
    a chain is kept only if it is ``margin`` times faster than plain decoding (the profile keeps no per-prompt
    counts, so its point prediction is its low end)."""
    plain_ms = _target_ms(b, 1)
    best = (0, plain_ms)
    for gamma in OPTIONS.gammas:
        ms = (gamma * b * CALL_MS + _target_ms(b, gamma + 1)) / expected_accepted_length(gamma, ALPHA)
        best = min(best, (gamma, ms), key=lambda pair: pair[1])
    return best[0] if b == 1 or plain_ms / best[1] >= margin else 0


def test_vllm_ranges_follow_the_brute_force_gamma():
    result = export_schedule(ngram_profile(), "vllm", OPTIONS)
    assert result.per_batch
    gammas = [_best_gamma(b) for b in BATCHES]
    assert gammas[0] > 0 and gammas[-1] == 0 and len(set(gammas)) > 2  # the instance moves the setting
    assert gammas != [_best_gamma(b, margin=1.0) for b in BATCHES]  # and the margin turns a batch's chain off
    for row, gamma in zip(result.rows, gammas):
        assert (row.stage.shape.gamma if row.stage else 0) == gamma
    for start, end, tokens in result.ranges:  # inclusive ranges cover every batch, each with its gamma
        for b in BATCHES:
            if start <= b <= end:
                assert tokens == _best_gamma(b)
    starts = [start for start, _, _ in result.ranges]
    assert starts[0] == 1 and all(a[1] + 1 == b[0] for a, b in zip(result.ranges, result.ranges[1:]))


def test_vllm_command_uses_only_recorded_fields():
    result = export_schedule(ngram_profile(), "vllm", OPTIONS)
    base = 'vllm serve m --speculative-config \'{"method": "ngram", "num_speculative_tokens": 1, "prompt_lookup_max": 3, "prompt_lookup_min": 1}\''
    command = vllm_schedule_command(base, result.ranges)
    assert unknown_names("vllm", command) == {}
    assert "num_speculative_tokens_per_batch_size" in load_record("vllm").sections["field"]
    config = json.loads(shlex.split(command)[-1])
    table = config["num_speculative_tokens_per_batch_size"]
    assert all(len(entry) == 3 for entry in table) and config["num_speculative_tokens"] == max(e[2] for e in table)


def test_sglang_takes_one_setting_and_states_its_loss():
    result = export_schedule(ngram_profile(), "sglang", OPTIONS)
    assert not result.per_batch and not result.ranges
    first = result.rows[0].stage
    assert all(row.stage == first for row in result.rows)
    last = result.rows[-1]
    assert last.fixed_loss > 0 and last.loss >= last.fixed_loss - 1e-9  # the batch-1 setting loses at load
    assert result.rows[0].fixed_loss == pytest.approx(0.0, abs=1e-6)
    assert any("one setting for all loads" in line for line in result.lines())


def test_export_cli_writes_the_schedule(tmp_path, capsys):
    profile = ngram_profile()
    save_profile(profile, tmp_path / "profile.yaml")
    plan, _ = with_schedule(solve_plan(profile, OPTIONS, profile_path="profile.yaml").plan, profile, OPTIONS)
    save_plan(plan, tmp_path / "plan.yaml")
    assert main(["export", str(tmp_path / "plan.yaml"), "--engine", "vllm", "--max-budget", "8", "--max-depth", "4",
                 "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["schedule"]["per_batch"] and record["schedule"]["ranges"]
    assert "num_speculative_tokens_per_batch_size" in record["config"]
    assert unknown_names("vllm", record["config"]) == {}

