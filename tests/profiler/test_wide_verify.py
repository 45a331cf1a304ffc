"""Which widths the llama.cpp target verifies on its unrepacked copy (profiler/wide_verify.py)."""

from __future__ import annotations

import pytest

from specplan.core.profile import LatencyCurve
from specplan.profiler.wide_verify import MARGIN, route

WIDTHS = (1, 2, 4, 8, 16, 32, 64)
REPACKED = LatencyCurve(256, WIDTHS, (40.0, 68.0, 113.0, 246.0, 284.0, 486.0, 824.0))


def wide(*ms: float) -> LatencyCurve:
    return LatencyCurve(256, WIDTHS, tuple(ms))


def test_the_wide_copy_takes_the_widths_from_where_it_stays_faster():
    curve, wide_from = route(REPACKED, wide(49.0, 98.0, 149.0, 305.0, 323.0, 466.0, 691.0))
    assert wide_from == 32
    assert curve.ms == REPACKED.ms[:5] + (466.0, 691.0) and curve.n == WIDTHS and curve.context == 256


def test_a_faster_width_below_a_slower_one_is_not_taken():
    """Faster at 8 but not at 16: the session routes by one threshold, so only 32 and 64 go wide."""
    curve, wide_from = route(REPACKED, wide(49.0, 98.0, 149.0, 200.0, 323.0, 466.0, 691.0))
    assert wide_from == 32 and curve.ms[3] == 246.0


@pytest.mark.parametrize("ms", [
    (49.0, 98.0, 149.0, 305.0, 323.0, 500.0, 830.0),  # never faster
    (40.0, 68.0, 113.0, 246.0, 284.0, 486.0, 824.0 * (1 - MARGIN / 2)),  # faster, but within the margin
])
def test_no_wide_copy_where_it_does_not_pay(ms):
    assert route(REPACKED, wide(*ms)) == (REPACKED, 0)


def test_no_wide_curve_or_other_widths_leave_the_curve_alone():
    assert route(REPACKED, None) == (REPACKED, 0)
    assert route(REPACKED, LatencyCurve(256, (1, 64), (49.0, 600.0))) == (REPACKED, 0)


def test_every_plan_loads_the_wide_copy_the_profile_chose():
    """runtime/backends/llama_cpp_backend.py wide_extend_width: the profile's width for any plan, plain decoding
    too, whose prompts prefill on the unrepacked copy; none where the profile chose none."""
    from dataclasses import replace

    from specplan.runtime.backends.llama_cpp_backend import wide_extend_width
    from tests.core.test_formats import make_profile

    profile = make_profile()
    assert wide_extend_width(profile) == 0  # the profile chose no wide copy
    profile = replace(profile, models=(replace(profile.models[0], wide_from=32),) + profile.models[1:])
    assert wide_extend_width(profile) == 32


def test_only_a_file_with_weights_llama_cpp_repacks_is_timed_on_a_second_copy(monkeypatch):
    """The default model's Q4_1 weights are not repacked: its two copies would run one set of kernels."""
    pytest.importorskip("llama_cpp")
    from specplan.models.load import load_gguf_model
    from specplan.runtime import llama_cpp_repack
    from specplan.runtime.backends.llama_cpp_backend import LlamaCppBackend

    backend, target = LlamaCppBackend(), load_gguf_model("default", exact=False)
    assert not backend.has_wide_copy(target)
    if llama_cpp_repack.repack_buffer_type() is None:
        pytest.skip("this llama.cpp build has no CPU_REPACK buffer type")
    monkeypatch.setattr(llama_cpp_repack, "gguf_weights", lambda path: [("blk.0.ffn_up.weight", "Q4_K", 8960)])
    assert backend.has_wide_copy(target)
    assert not backend.has_wide_copy(load_gguf_model("default", exact=True))  # exact numerics never repack
