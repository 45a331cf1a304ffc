"""``specplan export --engine vllm|sglang|tensorrt-llm`` with a draft head of EAGLE-3's layout: the
EAGLE-3 checkpoint is written, the command (TensorRT-LLM: its file) names it with the engine's
EAGLE-3 method (names in the recorded interfaces), and the written checkpoint loads back into
specplan drafting the same tokens. An EAGLE-1-layout head stays "specplan cannot write it" with the
reason."""

from __future__ import annotations

import json
import shlex

import pytest
import torch

from specplan.cli.main import main
from specplan.core.plan import save_plan
from specplan.core.profile import AcceptanceEntry, DeviceInfo, ModelEntry, Profile, save_profile
from specplan.core.yamlio import file_sha256
from specplan.distill.head_train import new_head
from specplan.planner import PlanOptions, solve_plan
from specplan.runtime.drafters.head_model import load_head, save_head

from tests.engine_records import check_config, tensorrt_llm_file, unknown_names
from tests.distill.test_distill import four_layer_llama
from tests.runtime.test_head_eagle3 import CPU, KEPT, proposals
from tests.planner.export.test_real import flat

pytestmark = pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")


def plan_with_head(directory, tmp_path):
    models = (ModelEntry("target", "default", "fp", dtype="float32", role="target", latency=(flat(40.0),)),
              ModelEntry("head-h", f"head:{directory}", "fp", dtype="float32", base="target", latency=(flat(2.0),)))
    acceptance = (AcceptanceEntry("head-h", "target", 0.0, 0.7, 8, rank_accept=(0.7, 0.2)),)
    profile = Profile(DeviceInfo("cpu", "test cpu", "cpu"), models, acceptance)
    save_profile(profile, tmp_path / "profile.yaml")
    result = solve_plan(profile, PlanOptions(), profile_path="profile.yaml",
                        profile_sha256=file_sha256(tmp_path / "profile.yaml"))
    save_plan(result.plan, tmp_path / "plan.yaml")
    return tmp_path / "plan.yaml"


@pytest.fixture
def eagle3_head(tmp_path):
    target = four_layer_llama(tied=False)
    torch.manual_seed(3)
    head = new_head(target, KEPT, "eagle3")
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.add_(0.3 * parameter.abs().mean() * torch.randn_like(parameter))
    save_head(head.eval(), tmp_path / "heads" / "h3", {})
    return target, tmp_path / "heads" / "h3"


@pytest.mark.parametrize("engine, method", [("vllm", "eagle3"), ("sglang", "EAGLE3")])
def test_export_writes_the_checkpoint_and_names_it(engine, method, eagle3_head, tmp_path, capsys, one_thread):
    target, directory = eagle3_head
    plan = plan_with_head(directory, tmp_path)
    assert main(["export", str(plan), "--engine", engine, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    checkpoint = tmp_path / f"export-{engine}" / "h3-eagle3"
    assert record["written"] == [str(checkpoint / "config.json"), str(checkpoint / "model.safetensors")]
    assert not record["not_writable_yet"] and any("EAGLE-3 checkpoint" in note for note in record["notes"])
    assert not unknown_names(engine, record["config"])
    words = shlex.split(record["config"])
    if engine == "vllm":
        config = json.loads(words[words.index("--speculative-config") + 1])
        assert (config["method"], config["model"]) == (method, str(checkpoint))
    else:
        flags = dict(zip(words[3::2], words[4::2]))
        assert flags["--speculative-algorithm"] == method
        assert flags["--speculative-draft-model-path"] == str(checkpoint)
    written = load_head(checkpoint, target, torch.float32, CPU)
    assert proposals(target, written) == proposals(target, load_head(directory, target, torch.float32, CPU))


def test_tensorrt_llm_drafts_with_the_written_checkpoint(eagle3_head, tmp_path, capsys, one_thread):
    _, directory = eagle3_head
    plan = plan_with_head(directory, tmp_path)
    assert main(["export", str(plan), "--engine", "tensorrt-llm", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    checkpoint = tmp_path / "export-tensorrt-llm" / "h3-eagle3"
    assert record["written"] == [str(checkpoint / "config.json"), str(checkpoint / "model.safetensors")]
    check_config("tensorrt-llm", record["config"])
    config = tensorrt_llm_file(record["config"])[1]["speculative_config"]
    assert (config["decoding_type"], config["speculative_model"]) == ("Eagle3", str(checkpoint))
    assert config["eagle3_layers_to_capture"] == [-1] and any("fc" in note for note in record["notes"])


def test_an_eagle1_head_is_left_out_with_the_reason(tmp_path, capsys):
    target = four_layer_llama(tied=False)
    save_head(new_head(target, KEPT), tmp_path / "h1", {})
    plan = plan_with_head(tmp_path / "h1", tmp_path)
    assert main(["export", str(plan), "--engine", "vllm", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["written"] == [] and "--layout eagle3" in record["not_writable_yet"][0]
