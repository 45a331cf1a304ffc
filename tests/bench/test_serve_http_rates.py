"""measurements/serve_http.py's rates: a streamed answer's first chunk is left out of its decode rate by
its tokens, not as one token (a specplan round streams a whole verified chain at once)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "measurements"))

from serve_http import summary  # noqa: E402


def row(tokens: int, first_tokens: int, ttft: float, decode_seconds: float) -> dict:
    return {"prompt_id": "p", "text": "", "tokens": tokens, "first_tokens": first_tokens, "ttft": ttft,
            "latency": ttft + decode_seconds, "decode_seconds": decode_seconds, "accepted_prediction": 0}


def test_the_first_chunks_tokens_are_not_decoded_after_it():
    # 128 tokens: 64 in the first chunk (a verified chain, its forward inside the TTFT), 64 in 0.5 s after it
    chained = summary([row(128, 64, 1.2, 0.5)], wall=1.7)
    assert chained["decode_pooled"] == pytest.approx(64 / 0.5)  # not 127 / 0.5
    assert chained["end_to_end"] == pytest.approx(128 / 1.7)
    one = summary([row(128, 1, 0.9, 3.81)], wall=4.71)  # llama-server: its prompt batch yields one token
    assert one["decode_pooled"] == pytest.approx(127 / 3.81)
    assert one["first_chunk_tokens"] == 1.0


def test_an_answer_that_is_all_first_chunk_adds_no_decode_rate():
    both = summary([row(20, 20, 1.0, 0.0), row(11, 1, 0.5, 1.0)], wall=2.5)
    assert both["decode_median"] == pytest.approx(10.0) and both["decode_pooled"] == pytest.approx(10.0)
