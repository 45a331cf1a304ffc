"""Latency-only profiles: T(n) of random-weight models built from a config or a named shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplan.cli.main import main
from specplan.core.errors import ModelError
from specplan.core.plan import load_plan
from specplan.core.profile import load_profile, shape_from_config
from specplan.models.arch import named_shapes, resolve_arch, scale_to_layers
from tests.cli.test_cli_errors import assert_one_line_error, run_cli

REPO = Path(__file__).resolve().parents[2]
SMALL = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 1024}


def write_config(folder: Path, **changes) -> Path:
    path = folder / "small.json"
    path.write_text(json.dumps({**SMALL, **changes}))
    return path


def test_scaling_in_layers_is_the_line_through_two_depths():
    # T(L) = 3 ms fixed + 2 ms per layer: two depths recover T at 80 layers
    assert scale_to_layers(3 + 2 * 2, 3 + 2 * 4, 2, 4, 80) == pytest.approx(3 + 2 * 80)
    assert scale_to_layers(5.0, 4.9, 1, 2, 80) == 5.0  # noise bigger than a layer: never below the slice


@pytest.mark.parametrize("name", sorted(named_shapes()))
def test_every_named_shape_resolves_to_a_decoder_shape(name):
    spec = resolve_arch(name)
    shape = shape_from_config(type("Fields", (), spec.config))
    assert shape is not None and shape.layers == spec.layers
    assert spec.fingerprint.startswith(f"arch:{name}:sha256:")


def test_the_70b_is_profiled_as_a_slice():
    spec = resolve_arch("llama-3-70b")
    assert spec.layers == 80 and spec.slice == (2, 4)


@pytest.mark.parametrize("changes, words", [
    ({"hidden_size": None}, "lacks hidden_size"),
    ({"slice": [4, 2]}, "slice must be two layer counts"),
    ({"slice": [1, 9]}, "slice must be two layer counts"),
])
def test_bad_configs_are_one_line_model_errors(tmp_path, changes, words):
    fields = {**SMALL, **changes}
    fields = {key: value for key, value in fields.items() if value is not None}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(fields))
    with pytest.raises(ModelError, match=words):
        resolve_arch(str(path))


def test_a_file_that_is_not_json_is_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe not json")
    with pytest.raises(ModelError, match="not a readable JSON config"):
        resolve_arch(str(path))


def test_a_latency_only_profile_of_a_small_random_llama(tmp_path, capsys):
    config = write_config(tmp_path, slice=[1, 2])
    output = tmp_path / "profile.yaml"
    code = main(["profile", "--latency-only", "--arch", str(config), "--quick", "--device", "cpu",
                 "--dtype", "float32", "-o", str(output)])
    assert code == 0, capsys.readouterr().err
    profile = load_profile(output)
    (target,) = profile.models
    assert (target.id, target.source, target.role) == ("target", "arch:small", "target")
    assert target.latency[0].n == (1, 2, 4, 8, 16, 32, 64) and all(ms > 0 for ms in target.latency[0].ms)
    assert target.shape.layers == 4  # the full depth, not the slice built
    assert "1 and 2 of its 4 layers" in profile.calibration["sources"]["target"]
    assert profile.acceptance == () and not (tmp_path / "plan.yaml").exists()  # nothing to plan with


def test_acceptance_from_a_measured_profile_gives_a_plan(tmp_path, capsys):
    # wide enough that a forward pass outweighs the lookup's fixed cost: at width 64 a pass takes
    # about 1 ms and timing noise alone decided between a 1.01x plan and plain decoding
    config = write_config(tmp_path, hidden_size=512, intermediate_size=1024)
    measured = REPO / "profiles" / "cpu" / "profile.yaml"
    output = tmp_path / "profile.yaml"
    code = main(["profile", "--latency-only", "--arch", str(config), "--quick", "--device", "cpu",
                 "--acceptance-from", str(measured), "-o", str(output)])
    assert code == 0, capsys.readouterr().err
    profile = load_profile(output)
    assert profile.acceptance and all(entry.verifier == "target" for entry in profile.acceptance)
    assert str(measured) in profile.calibration["sources"]["acceptance"]
    plan = load_plan(tmp_path / "plan.yaml")
    assert plan.stages  # the measured acceptance and this curve give a speculative plan


@pytest.mark.parametrize("argv, fragment", [
    (["profile", "--arch", "llama-3-8b"], "go with --latency-only"),
    (["profile", "--latency-only"], "needs --arch"),
    (["profile", "--latency-only", "--arch", "llama-3-8b", "--target", "default"], "drop --target"),
    (["profile", "--latency-only", "--arch", "no-such-shape"], "neither a named shape"),
])
def test_bad_latency_only_flags_are_one_line_errors(argv, fragment, capsys):
    code, err = run_cli(argv, capsys)
    assert_one_line_error(code, err, fragment)


def test_drafter_shapes_must_match_the_borrowed_profile(tmp_path, capsys):
    measured = REPO / "profiles" / "cpu-qwen" / "profile.yaml"  # one model drafter (the 0.5B)
    code, err = run_cli(["profile", "--latency-only", "--arch", str(write_config(tmp_path)), "--acceptance-from",
                         str(measured), "-o", str(tmp_path / "p.yaml")], capsys)
    assert_one_line_error(code, err, "give one --arch per drafter")


def test_a_latency_only_plan_cannot_run(tmp_path, capsys):
    from specplan.models.load import resolve_model_dir

    with pytest.raises(ModelError, match="latency-only shape"):
        resolve_model_dir("arch:llama-3-8b")


def test_a_4bit_latency_only_profile_packs_random_weights(tmp_path, capsys):
    """--quant gptq --quant nf4 --quant none: the target is GPTQ-packed random weights, NF4 and
    16-bit are comparison variants; every curve is measured (finite, positive)."""
    pytest.importorskip("bitsandbytes")
    pytest.importorskip("gptqmodel")
    config = write_config(tmp_path)
    output = tmp_path / "profile.yaml"
    code = main(["profile", "--latency-only", "--arch", str(config), "--quant", "gptq", "--quant", "nf4",
                 "--quant", "none", "--quick", "--device", "cpu", "-o", str(output)])
    assert code == 0, capsys.readouterr().err
    profile = load_profile(output)
    entries = {model.id: model for model in profile.models}
    assert set(entries) == {"target", "target-nf4", "target-bfloat16"}
    assert entries["target"].quant == "gptq-w4g64" and entries["target-nf4"].quant == "nf4"
    assert entries["target-bfloat16"].quant == "none" and entries["target-nf4"].role == "variant"
    assert "packed as gptq" in profile.calibration["sources"]["target"]
    for model in profile.models:
        assert all(ms > 0 for ms in model.latency[0].ms)


def test_random_gptq_packing_has_the_checkpoint_shapes(tmp_path):
    """qweight [in/8, out], qzeros [in/group, out/8] of symmetric zeros, scales [in/group, out], g_idx."""
    from safetensors import safe_open

    from specplan.models.arch import build_random
    from specplan.quant.random_weights import SYMMETRIC_ZEROS, random_label, write_random_gptq

    spec = resolve_arch(str(write_config(tmp_path)))
    folder = write_random_gptq(build_random(spec, "bfloat16", "cpu"), tmp_path / "gptq")
    with safe_open(str(folder / "model.safetensors"), "pt") as tensors:
        qweight = tensors.get_tensor("model.layers.0.mlp.down_proj.qweight")
        qzeros = tensors.get_tensor("model.layers.0.mlp.down_proj.qzeros")
        scales = tensors.get_tensor("model.layers.0.mlp.down_proj.scales")
        g_idx = tensors.get_tensor("model.layers.0.mlp.down_proj.g_idx")
    assert qweight.shape == (128 // 8, 64) and scales.shape == (128 // 64, 64) and qzeros.shape == (2, 8)
    assert bool((qzeros == SYMMETRIC_ZEROS).all()) and g_idx.tolist() == [i // 64 for i in range(128)]
    assert random_label(spec.config, "gptq") == "gptq-w4g64" and random_label(spec.config, "nf4") == "nf4"
