"""The roofline latency model, the SKU table and the calibration fit (planner/hardware/: roofline.py,
sku.py, calibration.py): monotone T(n), 4-bit steeper than bf16 at large n, sources on every figure,
one-line errors for unknown SKUs, and a fit that recovers a known calibration."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from specplan.core.errors import PlanError, ProfileError
from specplan.planner.hardware.calibration import compare_roofline, fit_calibration, transfer
from specplan.planner.hardware.roofline import (PRECISIONS, ROOFLINE_WIDTHS, Calibration, forward_cost, matmul_weights,
                                       precision_for, ridge_width, roofline_curve, roofline_ms)
from specplan.planner.hardware.sku import BUILTIN_SHAPES, get_sku, load_skus, model_shape, roofline_profile
from specplan.core.profile import AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, ModelShape, Profile

SMOL = BUILTIN_SHAPES["default"]  # SmolLM2-135M: 30 layers, hidden 576, 9/3 heads, vocab 49152
LLAMA_8B = ModelShape(32, 4096, 32, 8, 128, 128256, 14336, False)  # Llama-3.1-8B's config
REQUIRED_SKUS = ("a100-80gb", "h100-sxm", "h200", "l40s", "l4", "rtx-4090", "cpu")
WIDTHS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@pytest.fixture(scope="module")
def skus():
    return load_skus()


def test_sku_table_has_the_required_skus_with_sources(skus):
    assert set(REQUIRED_SKUS) <= set(skus)
    for name, sku in skus.items():
        assert sku.bandwidth_gbs > 0 and sku.vector_tflops > 0 and sku.memory_gb > 0, name
        assert sku.tflops.get("bf16") or sku.tflops.get("fp32"), name
        assert "figures" in sku.source and "overhead" in sku.source, f"{name} must say where its figures come from"
        assert any(word in sku.source["figures"] for word in ("datasheet", "measured", "derived")), name


def test_datasheet_figures_are_the_published_dense_ones(skus):
    assert skus["h100-sxm"].bandwidth_gbs == 3350 and skus["h100-sxm"].tflops["bf16"] == pytest.approx(989.4)
    assert skus["h200"].bandwidth_gbs == 4800 and skus["h200"].memory_gb == 141
    assert skus["a100-80gb"].tflops["int4"] == 1248 and skus["h100-sxm"].tflops["int4"] is None


@pytest.mark.parametrize("name", REQUIRED_SKUS)
@pytest.mark.parametrize("precision", ["bfloat16", "float32", "nf4", "gptq-w4g128"])
def test_roofline_is_monotone_in_n(skus, name, precision):
    times = [roofline_ms(SMOL, PRECISIONS[precision], n, 256, skus[name]) for n in WIDTHS]
    assert all(b >= a for a, b in zip(times, times[1:])), times
    assert all(math.isfinite(t) and t > 0 for t in times)


@pytest.mark.parametrize("name", REQUIRED_SKUS)
@pytest.mark.parametrize("shape", [SMOL, LLAMA_8B], ids=["smollm2-135m", "llama-8b"])
def test_four_bit_is_steeper_than_bf16_at_large_n(skus, name, shape):
    """Dequantisation grows with n (SpecMQuant, arXiv 2505.22179): T_4bit(n) - T_4bit(1) > the bf16 rise."""
    device = skus[name]
    bf16 = [forward_cost(shape, PRECISIONS["bfloat16"], n, 256, device) for n in (1, 1024)]
    nf4 = [forward_cost(shape, PRECISIONS["nf4"], n, 256, device) for n in (1, 1024)]
    assert nf4[1].compute_ms - nf4[0].compute_ms > bf16[1].compute_ms - bf16[0].compute_ms
    assert nf4[1].ms / nf4[0].ms > bf16[1].ms / bf16[0].ms
    if shape is LLAMA_8B:  # a 135M model at n = 1024 is bound by its activations' bytes in either precision
        assert nf4[1].ms - nf4[0].ms > bf16[1].ms - bf16[0].ms


def test_four_bit_is_faster_at_n_1_where_memory_bound(skus):
    """A memory-bound decode step reads a quarter of the bytes."""
    for name in ("h100-sxm", "l4", "a100-80gb"):
        device = replace(skus[name], overhead_per_forward_us=0.0, overhead_per_layer_us=0.0)
        bf16 = forward_cost(LLAMA_8B, PRECISIONS["bfloat16"], 1, 256, device)
        nf4 = forward_cost(LLAMA_8B, PRECISIONS["nf4"], 1, 256, device)
        assert bf16.bound == "memory" and nf4.ms < 0.4 * bf16.ms


def test_floor_is_bytes_over_bandwidth_at_one_token(skus):
    device = replace(skus["h100-sxm"], overhead_per_forward_us=0.0, overhead_per_layer_us=0.0, overhead_per_sequence_us=0.0)
    cost = forward_cost(LLAMA_8B, PRECISIONS["bfloat16"], 1, 0, device)
    weights = 2 * matmul_weights(LLAMA_8B)
    assert cost.bytes == pytest.approx(weights, rel=0.01)
    assert cost.ms == pytest.approx(cost.bytes / 3350e9 * 1e3)
    assert 4.3 < cost.ms < 4.7  # 15 GB (all but the input embedding) at 3.35 TB/s


def test_efficiency_and_overhead_enter_as_documented(skus):
    device = skus["cpu"]
    base = forward_cost(SMOL, PRECISIONS["bfloat16"], 1, 256, device)
    half = forward_cost(SMOL, PRECISIONS["bfloat16"], 1, 256, device, Calibration(0.5, 0.5))
    assert half.memory_ms == pytest.approx(2 * base.memory_ms)
    assert base.overhead_ms == pytest.approx((device.overhead_per_forward_us + 30 * device.overhead_per_layer_us) / 1e3)


def test_parameter_count_of_the_default_model():
    assert matmul_weights(SMOL) == SMOL.parameters  # tied: the head is the embedding, read once
    assert 134e6 < SMOL.parameters < 136e6


def test_precisions_of_profile_entries():
    assert precision_for("none", "bfloat16").weight_bits == 16
    assert precision_for("gptq-w4g128", "bfloat16").quantized and precision_for("gptq-w8g32", "x").weight_bits == 8.75
    assert precision_for("nf4", "bfloat16").weight_bits == 4.5
    with pytest.raises(ValueError, match="known"):
        precision_for("awq-w3", "bfloat16")


def test_ridge_width_is_where_compute_takes_over(skus):
    ridge = ridge_width(LLAMA_8B, PRECISIONS["bfloat16"], 256, skus["h100-sxm"])
    assert forward_cost(LLAMA_8B, PRECISIONS["bfloat16"], ridge, 256, skus["h100-sxm"]).bound == "compute"
    assert forward_cost(LLAMA_8B, PRECISIONS["bfloat16"], ridge - 1, 256, skus["h100-sxm"]).bound == "memory"
    assert ridge_width(LLAMA_8B, PRECISIONS["nf4"], 256, skus["h100-sxm"]) < ridge


def test_unknown_sku_is_a_one_line_error_listing_the_known(skus):
    with pytest.raises(PlanError) as error:
        get_sku("b200", skus)
    message = str(error.value)
    assert "\n" not in message and "b200" in message
    assert all(name in message for name in REQUIRED_SKUS)


def _measured_profile(curves: dict[str, LatencyCurve], shape: ModelShape | None = SMOL) -> Profile:
    models = (ModelEntry("target", "default", "fp", dtype="bfloat16", role="target", latency=(curves["target"],),
                         shape=shape),
              ModelEntry("layerskip-20", "layerskip:20", "fp", dtype="bfloat16", base="target",
                         latency=(curves["layerskip-20"],)))
    acceptance = (AcceptanceEntry("layerskip-20", "target", 0.0, 0.4, 8, rank_accept=(0.4, 0.1)),)
    return Profile(DeviceInfo("cpu", "test cpu", "cpu"), models, acceptance)


def test_shapes_come_from_the_profile_or_the_base_model():
    curve = LatencyCurve(256, (1, 2), (50.0, 51.0))
    profile = _measured_profile({"target": curve, "layerskip-20": curve})
    assert model_shape(profile, profile.model("target")) == SMOL
    assert model_shape(profile, profile.model("layerskip-20")).layers == 20
    anonymous = replace(profile, models=(replace(profile.models[0], source="model:/x", shape=None),) + profile.models[1:])
    with pytest.raises(ProfileError, match="re-profile"):
        model_shape(anonymous, anonymous.model("target"))


def test_roofline_profile_keeps_acceptance_and_marks_every_number(skus):
    curve = LatencyCurve(256, (1, 2), (50.0, 51.0))
    profile = _measured_profile({"target": curve, "layerskip-20": curve})
    modelled = roofline_profile(profile, skus["h100-sxm"])
    assert modelled.device.source == "roofline" and modelled.device.sku == "h100-sxm"
    assert modelled.acceptance == profile.acceptance
    for model in modelled.models:
        assert model.latency and all(c.source == "roofline" and c.n == ROOFLINE_WIDTHS for c in model.latency)
    assert modelled.model("layerskip-20").latency[0].ms[0] < modelled.model("target").latency[0].ms[0]


def test_fit_recovers_a_known_calibration(skus):
    """Curves generated by the roofline with known efficiencies and overheads are fitted back."""
    device = skus["cpu"]
    truth = Calibration(0.6, 0.3, 4000.0, 800.0)
    widths = (1, 2, 4, 8, 16, 32, 64)
    curves = {}
    for model_id, layers in (("target", 30), ("layerskip-20", 20)):
        shape = replace(SMOL, layers=layers)
        curves[model_id] = roofline_curve(shape, PRECISIONS["bfloat16"], 256, device, truth, widths)
        curves[model_id] = replace(curves[model_id], source="measured")
    profile = _measured_profile(curves)
    fitted = fit_calibration(profile, device, "synthetic")
    assert fitted.source == "fitted:synthetic"
    errors = [abs(point.error) for point in compare_roofline(profile, device, fitted)]
    assert max(errors) < 0.02, errors
    assert transfer(fitted).overhead_per_layer_us is None and transfer(fitted).compute_efficiency == fitted.compute_efficiency


def test_purity():
    import subprocess
    import sys

    modules = ("hardware.roofline", "hardware.sku", "hardware.calibration", "hardware.sku_plans", "export", "export.engines")
    code = ("import sys; " + "; ".join(f"import specplan.planner.{m}" for m in modules)
            + "; import specplan.cli.plan_sku, specplan.cli.roofline, specplan.cli.export; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
