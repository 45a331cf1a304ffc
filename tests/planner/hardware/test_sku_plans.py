"""``specplan plan PROFILE --sku``: modelled plans per SKU (measured acceptance, roofline latency),
the summary table, ``specplan roofline`` and the optional model shape in profile.yaml."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from specplan.cli.main import main
from specplan.core.plan import load_plan
from specplan.planner.hardware.sku import BUILTIN_SHAPES, load_skus
from specplan.core.profile import (AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry,
                              load_profile, profile_from_dict, profile_to_dict, save_profile, shape_from_config)

pytestmark = pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")


def measured_profile(shape=BUILTIN_SHAPES["default"]) -> Profile:
    """The default model's CPU profile in miniature (numbers like /tmp/prof1's)."""
    n = (1, 2, 4, 8, 16, 32, 64)
    target = LatencyCurve(256, n, (51.9, 51.0, 51.1, 51.1, 54.2, 67.8, 83.8))
    skip = LatencyCurve(256, n, (39.2, 35.9, 35.7, 38.7, 37.1, 46.4, 63.3))
    models = (ModelEntry("target", "default", "sha256:x", dtype="bfloat16", role="target", latency=(target,), shape=shape),
              ModelEntry("layerskip-20", "layerskip:20", "sha256:x|l", dtype="bfloat16", base="target", latency=(skip,)))
    acceptance = (
        AcceptanceEntry("ngram-3", "target", 0.0, 0.43, 8, (133, 11, 6, 5, 5, 3, 3, 2, 3), (0.22,)),
        AcceptanceEntry("layerskip-20", "target", 0.0, 0.19, 8, (140, 24, 4, 3, 0, 0, 0, 0, 0), (0.19, 0.04, 0.06)),
    )
    return Profile(DeviceInfo("cpu", "test cpu", "cpu"), models, acceptance, (RetrievalEntry("ngram-3", "ngram:3", 0.017),))


@pytest.fixture
def profile_path(tmp_path):
    path = tmp_path / "profile.yaml"
    save_profile(measured_profile(), path)
    return path


def one_line_error(code: int, err: str, fragment: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and fragment in lines[0] and "Traceback" not in err, err


def test_sku_all_writes_a_modelled_plan_per_sku_and_a_summary(profile_path, tmp_path, capsys):
    out = tmp_path / "plans"
    assert main(["plan", str(profile_path), "--sku", "all", "-o", str(out)]) == 0
    stdout = capsys.readouterr().out
    skus = load_skus()
    measured = load_profile(profile_path)
    for name in skus:
        plan = load_plan(out / name / "plan.yaml")
        assert plan.device == {"kind": skus[name].kind, "sku": name, "source": "roofline"}
        assert plan.solver["roofline"]["sku"] == name
        assert plan.predicted.speedup >= 1.0
        modelled = load_profile(out / name / plan.profile_path)
        assert modelled.device.source == "roofline" and modelled.device.sku == name
        assert modelled.acceptance == measured.acceptance  # acceptance is kept, latency replaced
        assert all(curve.source == "roofline" for model in modelled.models for curve in model.latency)
        assert modelled.calibration["roofline"]["measured_sha256"].startswith("sha256:")
        assert f"| {name} |" in stdout
    summary = (out / "summary.md").read_text()
    assert summary.count("\n| ") == len(skus) + 1 and "T(64)/T(1)" in summary
    assert measured == load_profile(profile_path)  # the measured profile is left alone


def test_single_sku_plan_is_exportable(profile_path, tmp_path, capsys):
    plan_path = tmp_path / "h100" / "plan.yaml"
    assert main(["plan", str(profile_path), "--sku", "h100-sxm", "-o", str(plan_path), "--efficiency", "0.8"]) == 0
    plan = load_plan(plan_path)
    assert plan.device["source"] == "roofline"
    assert plan.solver["roofline"]["calibration"]["bandwidth_efficiency"] == 0.8
    capsys.readouterr()
    assert main(["export", str(plan_path), "--engine", "vllm", "--json"]) == 0
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    assert record["loss"] >= 0 and "modelled for h100-sxm" in captured.err


def test_fit_efficiency_uses_the_profiles_own_device(profile_path, tmp_path):
    assert main(["plan", str(profile_path), "--sku", "cpu", "--fit-efficiency", "-o", str(tmp_path / "c" / "plan.yaml")]) == 0
    calibration = load_plan(tmp_path / "c" / "plan.yaml").solver["roofline"]["calibration"]
    assert calibration["source"].startswith("fitted:") and calibration["overhead_per_layer_us"] is not None
    assert main(["plan", str(profile_path), "--sku", "l4", "--fit-efficiency", "-o", str(tmp_path / "l" / "plan.yaml")]) == 0
    transferred = load_plan(tmp_path / "l" / "plan.yaml").solver["roofline"]["calibration"]
    assert transferred["overhead_per_layer_us"] is None  # only the efficiencies travel to another SKU


def test_unknown_sku_exits_2_with_one_line_listing_the_known(profile_path, capsys):
    code = main(["plan", str(profile_path), "--sku", "b200"])
    one_line_error(code, capsys.readouterr().err, "known: a100-80gb, a100-80gb-pcie, h100-sxm, h200, l40s, l40, l4, rtx-4090, rtx-3090, cpu")


def test_profile_without_shapes_is_a_one_line_error(tmp_path, capsys):
    profile = measured_profile(shape=None)
    profile = replace(profile, models=(replace(profile.models[0], source="model:/some/dir"),) + profile.models[1:])
    save_profile(profile, tmp_path / "profile.yaml")
    code = main(["plan", str(tmp_path / "profile.yaml"), "--sku", "l4"])
    one_line_error(code, capsys.readouterr().err, "re-profile")


def test_roofline_command_prints_the_error_per_n(profile_path, capsys):
    assert main(["roofline", str(profile_path), "--fit"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("target ", "layerskip-20 "))]
    assert len(rows) == 14 and "fitted: bandwidth efficiency" in out
    assert all(line.count("%") == 3 for line in rows)  # floor, roofline and fitted errors


def test_shape_round_trips_and_is_optional():
    profile = measured_profile()
    assert profile_from_dict(profile_to_dict(profile)) == profile
    document = profile_to_dict(measured_profile(shape=None))
    assert "shape" not in document["models"][0]
    assert profile_from_dict(document).target.shape is None


def test_shape_from_a_config_object():
    config = SimpleNamespace(num_hidden_layers=30, hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                             head_dim=64, vocab_size=49152, intermediate_size=1536, tie_word_embeddings=True)
    shape = shape_from_config(config)
    assert replace(shape, parameters=BUILTIN_SHAPES["default"].parameters, source="builtin") == BUILTIN_SHAPES["default"]
    assert shape_from_config(config, layers=20).layers == 20
    assert shape_from_config(SimpleNamespace()) is None


def test_profiler_records_the_shape_of_a_network_and_of_its_layer_skip_view():
    """What runtime/profiler/run.py stores: model.config, with the layers a view actually keeps."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from specplan.core.profile import shape_of_network
    from specplan.runtime.drafters.layerskip import layer_skip_view

    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    shape = shape_of_network(model)
    assert (shape.layers, shape.hidden, shape.heads, shape.kv_heads, shape.head_dim, shape.vocab) == (4, 32, 4, 2, 8, 128)
    assert shape_of_network(layer_skip_view(model, (0, 1))).layers == 2
