"""measurements/compare_plans.py's table: decode rate after the prefill and the per-forward split."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "measurements"))
from compare_plans import summarize  # noqa: E402

from specplan.bench.metrics import Measurement  # noqa: E402


def row(method, tokens, seconds, forwards, prefill=None, draft=None, verify=None):
    measurement = Measurement(tuple(range(tokens)), seconds, forwards, seconds, prefill, draft, verify)
    return SimpleNamespace(method=method, measurement=measurement, speedup=1.0, check=None)


def test_summarize_reports_the_decode_rate_and_the_split_per_target_forward():
    rows = [row("plan", 64, 2.0, 40, prefill=0.4, draft=0.2, verify=1.2),
            row("plan", 32, 1.0, 20, prefill=0.2, draft=0.1, verify=0.6),
            row("peer", 64, 2.0, 64)]
    methods = [SimpleNamespace(name="plan", description="a plan"), SimpleNamespace(name="peer", description="hf")]
    plan, peer = summarize(rows, methods, {"plan": 50.0})
    assert plan["tokens_per_s"] == pytest.approx(32.0) and plan["decode_tokens_per_s"] == pytest.approx(40.0)
    assert plan["draft_ms_per_forward"] == pytest.approx(5.0) and plan["verify_ms_per_forward"] == pytest.approx(30.0)
    assert plan["accepted_per_target_forward"] == pytest.approx(1.6) and plan["predicted_tokens_per_s"] == 50.0
    assert peer["decode_tokens_per_s"] is None and "draft_ms_per_forward" not in peer  # no prefill split for a peer
