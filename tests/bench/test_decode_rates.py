"""measurements/decode_rates.py: decode steps counted alike, and per-category ratios with their spread."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "measurements"))
from decode_rates import category_intervals, decode_step  # noqa: E402


def row(method, prompt, rate, category="c", tokens=101):
    return {"method": method, "prompt_id": prompt, "category": category, "new_tokens": tokens, "decode_tokens_per_s": rate}


def test_a_peers_first_token_is_its_prefills_and_old_rows_counted_it():
    assert decode_step(row("plan", "1", 101.0), old=False) == (101, 1.0)
    assert decode_step(row("llama-server", "1", 100.0), old=False) == (100, 1.0)  # 100 decoded in 1 s
    assert decode_step(row("llama-server", "1", 101.0), old=True) == (100, 1.0)  # an old rate counted all 101
    assert decode_step(row("plan", "1", None), old=False) is None


def test_per_category_ratios_pair_the_prompts_and_carry_their_spread():
    rows = [row("plan", str(p), rate) for p, rate in enumerate((101.0, 101.0, 202.0, 202.0))]
    rows += [row("llama-server", str(p), 100.0) for p in range(4)] + [row("plan", "9", 50.0, "lonely")]
    (prompts, ratio, spread), = category_intervals(rows, False, "plan", "llama-server").values()
    assert prompts == 4 and ratio == pytest.approx(404 / 3 / 100)  # 404 tokens in 3 s against 100 tok/s
    assert 1.01 <= spread[0] < ratio < spread[1] <= 2.02  # all-slow to all-fast resamples
