"""``specplan predict``: the published-setting format, a prediction computed by hand, and the
direction checks over the settings in measurements/published-settings/ (docs/planner-math.md
section 13). The direction checks are run once more on a roofline without the per-sequence
overhead, or with 16-bit bytes for 4-bit weights, to show that they fail there."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from specplan.api import predict
from specplan.cli.main import main
from specplan.core.errors import SettingError
from specplan.core.profile import ModelShape
from specplan.core.published import load_setting, setting_from_dict
from specplan.models.arch import shape_of_arch
from specplan.planner import predict as model
from specplan.planner.predict import NGRAM_CALL_MS, PRECISION_KEYS, RoleModel, predict_setting
from specplan.planner.hardware.roofline import PRECISIONS, DeviceRoof, Precision
from specplan.planner.hardware.sku import load_skus

pytestmark = pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")
SETTINGS = Path(__file__).resolve().parents[2] / "measurements" / "published-settings"

BASE = {
    "schema_version": 1, "name": "hand", "source": "a test", "sku": "a100-80gb", "batch": 1,
    "target": {"arch": "llama-3-8b", "precision": "fp16"}, "drafter": {"kind": "ngram"},
    "acceptance": {"position_rates": [0.5, 0.5]},
    "measured": {"shape": {"kind": "sequence", "gamma": 2}, "speedup": 1.5},
}


def changed(path: str, value) -> dict:
    """BASE with the key at dotted ``path`` set to ``value`` (``...`` deletes it)."""
    document = json.loads(json.dumps(BASE))
    *parents, last = path.split(".")
    where = document
    for key in parents:
        where = where[key]
    if value is ...:
        del where[last]
    else:
        where[last] = value
    return document


@pytest.mark.parametrize("path, value, words", [
    ("extra", 1, "unknown key(s) extra"),
    ("batch", ..., "lacks batch"),
    ("schema_version", 2, "schema_version 2"),
    ("target.precision", "int3", "is not one of fp16, bf16, w8a8, w4a16, w4a8"),
    ("target.size", 7, "unknown key(s) size"),
    ("drafter", {"kind": "lookup"}, "drafter.kind 'lookup'"),
    ("drafter", {"kind": "head"}, "drafter lacks arch"),
    ("drafter", {"kind": "ngram", "arch": "x"}, "unknown key(s) arch"),
    ("acceptance", {"tau": 3.0, "position_rates": [0.5]}, "exactly one of position_rates"),
    ("acceptance", {"tau": 0.5}, "acceptance.tau = 0.5 is out of range"),
    ("acceptance", {"position_rates": [0.5, 1.5]}, "position_rates[1] = 1.5 is out of range"),
    ("acceptance", {"position_rates": [0.5]}, "gives 1 rates for a chain of 2"),
    ("measured.shape", {"kind": "tree", "budget": 4, "depth": 4}, "has depth < 4"),
    ("measured.shape", {"kind": "tree", "budget": 999, "depth": 4}, "budget = 999 is out of range"),
    ("measured.shape", {"kind": "chain", "gamma": 2}, "measured.shape must be"),
    ("measured.speedup", "fast", "measured.speedup must be a number"),
    ("batch", 0, "batch = 0 is out of range"),
    ("name", "", "name must be a non-empty string"),
])
def test_a_malformed_setting_is_one_line_naming_the_key(path, value, words):
    with pytest.raises(SettingError) as caught:
        setting_from_dict(changed(path, value))
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("path, value, words", [
    ("sku", "a100-40gb", "sku 'a100-40gb' is not in the SKU table"),
    ("target", {"arch": "llama-9-9b", "precision": "fp16"}, "target.arch"),
])
def test_the_cli_refuses_unknown_names_with_exit_2(tmp_path, capsys, path, value, words):
    setting = tmp_path / "setting.yaml"
    setting.write_text(yaml.safe_dump(changed(path, value)), encoding="utf-8")
    assert main(["predict", str(setting)]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in lines[0]


def overhead_only(per_forward_us: float, per_layer_us: float) -> DeviceRoof:
    """A device whose memory and compute take no time: T(n) is its overhead, exactly."""
    return DeviceRoof("hand", "hand", "cuda", 1e12, {"fp16": 1e12}, 1e12, overhead_per_forward_us=per_forward_us,
                      overhead_per_layer_us=per_layer_us)


def test_a_chain_from_position_rates_is_priced_by_hand():
    # T(n) = 1 ms; E = 1 + 0.5 + 0.25; a round drafts twice by lookup and verifies 3 tokens
    setting = setting_from_dict(BASE)
    target = RoleModel(shape_of_arch("llama-3-8b"), PRECISIONS["float16"])
    result = predict_setting(setting, target, RoleModel(None, None), overhead_only(1000.0, 0.0))
    assert result.accepted_length == pytest.approx(1.75)
    assert result.predicted_speedup == pytest.approx(1.75 * 1.0 / (2 * NGRAM_CALL_MS + 1.0), rel=1e-6)
    assert result.top_rate == pytest.approx(0.5, abs=1e-6)


def test_a_tree_from_tau_is_priced_by_hand():
    # tau 1.75 at a root with two children: 1 + a + a(1 - a) = 1.75 gives a = 0.5. T_target = 10
    # layers x 100 us = 1 ms, T_drafter = 1 layer = 0.1 ms; one draft level, then a verify of 3
    document = changed("measured.shape", {"kind": "tree", "budget": 3, "depth": 1})
    document["acceptance"] = {"tau": 1.75}
    document["drafter"] = {"arch": "llama-3-8b", "precision": "fp16"}
    setting = setting_from_dict(document)
    shape = shape_of_arch("llama-3-8b")
    target = RoleModel(replace(shape, layers=10), PRECISIONS["float16"])
    drafter = RoleModel(replace(shape, layers=1), PRECISIONS["float16"])
    result = predict_setting(setting, target, drafter, overhead_only(0.0, 100.0))
    assert result.top_rate == pytest.approx(0.5, abs=1e-6)
    assert result.predicted_speedup == pytest.approx(1.75 / (0.1 + 1.0), rel=1e-6)
    assert result.chosen["kind"] in ("tree", "sequence")


def test_the_memoryless_rank_model_rises_with_its_rate():
    shape = model.MeasuredShape("tree", budget=64, depth=6)
    values = [model.shape_accepted(shape, rate) for rate in (0.2, 0.4, 0.6, 0.8)]
    assert values == sorted(values) and values[0] < values[-1]


def _predictions(skus: dict[str, DeviceRoof], precisions: dict[str, Precision],
                 pattern: str = "*.yaml") -> dict[str, model.Prediction]:
    def role(ref):
        if ref.kind == "ngram":
            return RoleModel(None, None)
        return RoleModel(shape_of_arch(ref.arch), precisions[PRECISION_KEYS[ref.precision]], ref.kind == "head")

    settings = [load_setting(path) for path in sorted(SETTINGS.glob(pattern))]
    return {s.name: predict_setting(s, role(s.target), role(s.drafter), skus[s.sku]) for s in settings}


@pytest.fixture(scope="module")
def predicted():
    return _predictions(load_skus(), PRECISIONS)


def gain(predictions, name: str) -> float:
    return predictions[name].predicted_speedup


def quantised_gain_is_smaller(predictions) -> bool:
    """W4A16's gain below FP16's on each GPU, and below on the 3090 than on the A100 (SpecMQuant)."""
    a100, rtx = "specmquant-a100-llama3-8b-{}-eagle2", "specmquant-rtx3090-llama3-8b-{}-eagle2"
    return (gain(predictions, a100.format("w4a16")) < gain(predictions, a100.format("fp16"))
            and gain(predictions, rtx.format("w4a16")) < gain(predictions, rtx.format("fp16"))
            and gain(predictions, rtx.format("w4a16")) < gain(predictions, a100.format("w4a16")))


def gain_falls_with_batch(predictions) -> bool:
    """EAGLE and EAGLE-3's chains of 3 in SGLang: the gain falls from batch 1 to 64 (EAGLE-3 Tables 3, 4)."""
    for method in ("eagle", "eagle3"):
        gains = [gain(predictions, f"eagle3-sglang-h100-llama31-8b-{method}-b{b}") for b in (1, 2, 4, 8, 16, 24, 32, 48, 56, 64)]
        if not all(later < earlier for earlier, later in zip(gains, gains[1:])):
            return False
    return True


def test_most_settings_are_predicted_within_a_quarter(predicted):
    ratios = [p.ratio for p in predicted.values()]
    assert len(ratios) >= 60
    assert sum(0.8 <= r <= 1.25 for r in ratios) >= 0.8 * len(ratios)
    assert 0.9 <= statistics.median(ratios) <= 1.1


def test_four_bit_weights_gain_less_and_least_on_the_3090(predicted):
    assert quantised_gain_is_smaller(predicted)


def test_the_gain_falls_with_batch_size(predicted):
    assert gain_falls_with_batch(predicted)


def test_the_batch_check_fails_without_the_per_sequence_overhead():
    """Without 40 us per sequence per forward the modelled gain stays flat from batch 1 to 64."""
    no_sequence = {name: replace(sku, overhead_per_sequence_us=0.0) for name, sku in load_skus().items()}
    assert not gain_falls_with_batch(_predictions(no_sequence, PRECISIONS, "eagle3-*.yaml"))


def test_the_quantised_directions_come_from_the_memory_floor_not_dequantisation():
    """SpecMQuant's directions hold with dequantisation switched off (a 61-node verify fits one
    64-row dequantisation pass); with fp16 bytes for the 4-bit weights they fail."""
    free = {name: replace(p, dequant_ops=0.0) if p.quantized else p for name, p in PRECISIONS.items()}
    assert quantised_gain_is_smaller(_predictions(load_skus(), free, "specmquant-*.yaml"))
    sixteen_bit = {name: replace(p, weight_bits=16.0, dequant_ops=0.0) if p.quantized else p
                   for name, p in PRECISIONS.items()}
    assert not quantised_gain_is_smaller(_predictions(load_skus(), sixteen_bit, "specmquant-*.yaml"))


def budget(predictions, name: str) -> int:
    return predictions[name].chosen["budget"]


def test_bigger_targets_get_no_bigger_trees_on_one_gpu(predicted):
    """Sequoia (Table 1, Appendix Table 3) chose 128 nodes for Llama2-7B on the A100, 64 for 13B and 33B."""
    for data in ("c4-t0", "owt-t0", "cnn-t0"):
        sizes = [budget(predicted, f"sequoia-a100-{target}-{data}") for target in ("llama2-7b", "llama2-13b", "vicuna-33b")]
        assert sizes == sorted(sizes, reverse=True)


@pytest.mark.xfail(strict=True, reason="the roofline's ridge is higher on the L40 (181 TFLOPS / 864 GB/s) than on the "
                   "A100 PCIe (312 / 1,935), so it grows wider trees there; Sequoia measured 64 nodes on the L40 "
                   "against 128 on the A100 (docs/results.md, 'Published GPU results')")
def test_the_a100_gets_bigger_trees_than_the_l40(predicted):
    for data in ("c4-t0", "owt-t0", "cnn-t0"):
        assert budget(predicted, f"sequoia-a100-llama2-7b-{data}") > budget(predicted, f"sequoia-l40-llama2-7b-{data}")


def test_predict_json_has_the_documented_keys(capsys):
    path = SETTINGS / "sequoia-a100-llama2-7b-c4-t0.yaml"
    assert main(["predict", str(path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out.strip())
    for key in ("name", "sku", "measured_speedup", "predicted_speedup", "chosen_shape", "chosen_predicted_speedup"):
        assert key in record
    assert record["chosen_shape"]["kind"] in ("tree", "sequence", "plain")
    assert record["predicted_speedup"] == pytest.approx(predict(path).predicted_speedup, rel=1e-3)


def test_a_head_shape_counts_its_feature_projection():
    target, head = shape_of_arch("llama-3.1-8b"), shape_of_arch("eagle3-head-llama-3.1-8b")
    assert isinstance(head, ModelShape) and head.layers == 1 and head.vocab == 32000
    assert head.extra_weights > 3 * target.hidden * target.hidden
