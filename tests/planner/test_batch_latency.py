"""T(n, b): batched latency curves in profile.yaml (schema 2), the roofline's batch axis and the
profiler's batched measurement."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml

from specplan.cli.main import main
from specplan.core.errors import ProfileError
from specplan.core.profile import LatencyCurve, batch_sizes, load_profile, save_profile
from specplan.planner.latency import latency_table, nearest_curve
from specplan.planner.hardware.roofline import PRECISIONS, forward_cost, largest_batch
from specplan.planner.hardware.sku import get_sku, roofline_profile
from tests.core.test_formats import make_profile

PROFILES = sorted((Path(__file__).resolve().parents[2] / "profiles").glob("*/*.yaml"))
STORED_PROFILES = [path for path in PROFILES if yaml.safe_load(path.read_text()).get("acceptance") is not None]
# profiles written before T(n, b) (schema 1); the ones measured with --batch-sizes are version 2
VERSION_ONE = [path for path in STORED_PROFILES if yaml.safe_load(path.read_text())["schema_version"] == 1]
BATCHED = [path for path in STORED_PROFILES if path not in VERSION_ONE]


def _batched(profile, factor: float = 1.5):
    """``profile`` with a batch-4 curve beside every model's batch-1 curve (4 sequences cost ``factor`` x)."""
    models = []
    for model in profile.models:
        extra = tuple(LatencyCurve(c.context, c.n, tuple(v * factor for v in c.ms), c.source, 4) for c in model.latency)
        models.append(replace(model, latency=extra + model.latency))  # batch 4 first: the loader sorts
    return replace(profile, models=tuple(models))


# each stored batched profile's folder and the batch sizes it was measured at (the H200's: the GPU check)
STORED_BATCHES = {"cpu-batched": (1, 2, 4, 8), "cpu-qwen-gptq-batched": (1, 2, 4, 8), "gpu-h200": (1, 4, 16, 64)}


def test_the_stored_batched_profile_is_version_two_with_its_batches():
    assert [path.parent.name for path in BATCHED] == list(STORED_BATCHES)
    for path in BATCHED:
        profile = load_profile(path)
        assert batch_sizes(profile) == STORED_BATCHES[path.parent.name]
        assert [curve.batch for curve in profile.target.batch_overhead] in ([], [2, 4, 8])


@pytest.mark.parametrize("path", VERSION_ONE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stored_profiles_load_as_batch_one_and_stay_version_one(path, tmp_path):
    profile = load_profile(path)
    assert batch_sizes(profile) == (1,)
    assert all(curve.batch == 1 for model in profile.models for curve in model.latency)
    save_profile(profile, tmp_path / "again.yaml")
    text = (tmp_path / "again.yaml").read_text()
    assert text.startswith("schema_version: 1") and "batch:" not in text


def test_batched_profile_is_version_two_and_round_trips(tmp_path):
    profile = _batched(make_profile())
    save_profile(profile, tmp_path / "profile.yaml")
    assert (tmp_path / "profile.yaml").read_text().startswith("schema_version: 2")
    loaded = load_profile(tmp_path / "profile.yaml")
    assert batch_sizes(loaded) == (1, 4)
    target = loaded.target
    assert [c.batch for c in target.latency] == [1, 4]  # batch 1 first: latency[0] readers get T(n)
    assert nearest_curve(target, 256).batch == 1 and nearest_curve(target, 256, batch=4).batch == 4
    assert nearest_curve(target, 256, batch=8) is None
    assert latency_table(target, 256, 8)(1) == target.latency[0].ms[0]


def test_version_one_with_a_batch_is_refused(tmp_path):
    save_profile(_batched(make_profile()), tmp_path / "profile.yaml")
    text = (tmp_path / "profile.yaml").read_text().replace("schema_version: 2", "schema_version: 1", 1)
    (tmp_path / "profile.yaml").write_text(text)
    with pytest.raises(ProfileError, match="needs schema_version 2"):
        load_profile(tmp_path / "profile.yaml")


def test_unknown_version_is_refused_naming_both(tmp_path):
    save_profile(make_profile(), tmp_path / "profile.yaml")
    text = (tmp_path / "profile.yaml").read_text().replace("schema_version: 1", "schema_version: 3", 1)
    (tmp_path / "profile.yaml").write_text(text)
    with pytest.raises(ProfileError, match="reads 1 or 2"):
        load_profile(tmp_path / "profile.yaml")


SMOL = get_sku("h100-sxm")


def test_roofline_reads_weights_once_per_forward_and_kv_per_sequence():
    from specplan.planner.hardware.sku import BUILTIN_SHAPES

    shape, precision = BUILTIN_SHAPES["default"], PRECISIONS["bfloat16"]
    one = forward_cost(shape, precision, 4, 256, SMOL)
    eight = forward_cost(shape, precision, 4, 256, SMOL, batch=8)
    kv = shape.layers * 2 * shape.kv_heads * shape.head_dim * (256 + 4) * 2
    assert eight.flops == pytest.approx(8 * one.flops)
    assert eight.bytes - one.bytes == pytest.approx(7 * (one.bytes - _weight_bytes(shape)))
    assert eight.bytes - one.bytes > 7 * kv  # KV per sequence (and activations per row)
    assert eight.ms < 8 * one.ms  # memory-bound: the weights are shared by the batch
    assert one.bound == "memory"


def _weight_bytes(shape) -> float:
    from specplan.planner.hardware.roofline import matmul_weights

    return matmul_weights(shape) * 2


def test_roofline_dequantises_once_per_tile_of_batch_rows():
    from specplan.planner.hardware.sku import BUILTIN_SHAPES

    shape, gptq, tile = BUILTIN_SHAPES["default"], PRECISIONS["gptq-w4g128"], SMOL.dequant_tile
    assert forward_cost(shape, gptq, 4, 256, SMOL, batch=tile // 4).dequant_ops == \
        forward_cost(shape, gptq, tile, 256, SMOL).dequant_ops
    assert forward_cost(shape, gptq, 4, 256, SMOL, batch=tile // 4 + 1).dequant_ops == \
        2 * forward_cost(shape, gptq, 1, 256, SMOL).dequant_ops


def test_roofline_profile_models_every_batch_asked():
    modelled = roofline_profile(make_profile(), SMOL, batches=(2, 8))
    assert batch_sizes(modelled) == (1, 2, 8)
    target = modelled.target
    t = {c.batch: c.ms[0] for c in target.latency}
    assert t[1] < t[2] < t[8] < 8 * t[1]


def test_largest_batch_follows_memory():
    from specplan.planner.hardware.sku import BUILTIN_SHAPES

    small = largest_batch(BUILTIN_SHAPES["default"], PRECISIONS["bfloat16"], 256, get_sku("l4"), 64)
    large = largest_batch(BUILTIN_SHAPES["default"], PRECISIONS["bfloat16"], 256, get_sku("h200"), 64)
    assert 0 < small < large


def _tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1)
    return LlamaForCausalLM(config).eval()


def test_batched_measurement_leaves_the_cache_at_the_context(one_thread):
    from specplan.profiler import batch_latency

    model, device = _tiny(), torch.device("cpu")
    curve = batch_latency.measure_batch_latency(model, device, list(range(2, 18)), 3, (1, 2, 4), repeats=1)
    assert curve.batch == 3 and curve.n == (1, 2, 4) and curve.context == 16
    assert all(math.isfinite(v) and v > 0 for v in curve.ms)
    assert batch_latency.batch_widths(32, (1, 2, 4, 8, 16, 32, 64), 512) == (1, 2, 4, 8, 16)
    assert batch_latency.batch_widths(4096, (1, 2), 512) == (1,)


def test_out_of_memory_ends_the_batched_curves(monkeypatch, one_thread):
    from specplan.profiler import batch_latency

    real = batch_latency.measure_batch_latency

    def failing(model, device, context, batch, widths, repeats, progress, step):
        if batch >= 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate")
        return real(model, device, context, batch, widths, repeats, progress, step)

    monkeypatch.setattr(batch_latency, "measure_batch_latency", failing)
    with pytest.warns(UserWarning, match="batch 4 does not fit"):
        curves = batch_latency.measure_batch_curves(_tiny(), torch.device("cpu"), list(range(2, 10)), (1, 2, 4, 8), 1)
    assert [c.batch for c in curves] == [2]


@pytest.mark.parametrize("value", ["x", "0,2", "1,,-3"])
def test_bad_batch_sizes_are_one_line(value, capsys, tmp_path):
    code = main(["profile", "--batch-sizes", value, "-o", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--batch-sizes" in err


def test_batched_forward_through_a_static_step_computes_each_rows_own_logits(one_thread):
    """The static-cache path (CUDA graphs time it on a GPU) runs the forward it claims to: each
    row's logits for the new tokens equal a full forward over context + new tokens, at every width."""
    from specplan.profiler import batch_latency
    from specplan.runtime.compile.compiled import _step

    model, device = _tiny(), torch.device("cpu")
    context = list(range(2, 18))
    seen: dict[int, torch.Tensor] = {}

    def step(model, cache, input_ids, position_ids, attention_mask):
        logits, hidden = _step(model, cache, input_ids, position_ids, attention_mask)
        seen[input_ids.shape[1]] = logits
        return logits, hidden

    curve = batch_latency.measure_batch_latency(model, device, context, 3, (1, 2, 4), repeats=1, step=step)
    assert curve.batch == 3 and curve.n == (1, 2, 4) and all(math.isfinite(v) and v > 0 for v in curve.ms)
    filler = batch_latency._filler(context, (1, 2, 4))
    for width in (1, 2, 4):
        with torch.no_grad():
            full = model(torch.tensor([context + filler[:width]])).logits[0, -width:]
        assert seen[width].shape[:2] == (3, width)
        for row in range(3):
            torch.testing.assert_close(seen[width][row], full, rtol=1e-4, atol=1e-4)


def test_batched_curves_time_through_graphs_only_on_cuda_with_a_compiled_runtime():
    from specplan.core.runtime_modes import RuntimeMode
    from specplan.profiler.batch_latency import batch_step

    model = _tiny()
    assert batch_step(model, torch.device("cpu"), RuntimeMode("compiled")) is None
    assert batch_step(model, torch.device("cuda"), RuntimeMode("eager")) is None
