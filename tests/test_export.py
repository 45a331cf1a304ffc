"""``specplan export``: engine configs that parse, use only documented field names, and say what
the engine's restrictions cost against the unrestricted plan."""

from __future__ import annotations

import json
import shlex

import pytest

from specplan.cli.main import main
from specplan.core.errors import PlanError
from specplan.core.plan import save_plan
from specplan.planner import PlanOptions, solve_plan
from specplan.planner.export import describe, export_plan
from specplan.planner.export_engines import ENGINES
from specplan.core.profile import (AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry,
                              save_profile)
from specplan.core.yamlio import file_sha256

pytestmark = pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")  # pairs the profiles omit

# Allow-lists, each from the engine's own source or documentation (checked 2026-11-22):
# vLLM vllm/config/speculative.py, class SpeculativeConfig (vllm-project/vllm @ 002e77c1f0ef).
VLLM_FIELDS = {"method", "num_speculative_tokens", "model", "prompt_lookup_max", "prompt_lookup_min",
               "draft_tensor_parallel_size", "quantization", "revision"}
VLLM_METHODS = {"ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "ngram_gpu"}
# SGLang docs/advanced_features/server_arguments.md, "Speculative decoding" and "Ngram speculative
# decoding" (sgl-project/sglang @ b36e8e198b71).
SGLANG_FLAGS = {"--speculative-algorithm", "--speculative-draft-model-path", "--speculative-draft-model",
                "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                "--speculative-ngram-min-match-window-size", "--speculative-ngram-max-match-window-size",
                "--speculative-ngram-min-bfs-breadth", "--speculative-ngram-max-bfs-breadth"}
SGLANG_ALGORITHMS = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"}
# transformers 5.23 generation/configuration_utils.py (GenerationConfig) and
# generation/candidate_generator.py (the assistant's generation_config is read there).
TRANSFORMERS_KWARGS = {"assistant_model", "prompt_lookup_num_tokens", "max_matching_ngram_size", "assistant_early_exit"}
TRANSFORMERS_ASSISTANT = {"num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold"}
# llama.cpp tools/server/README.md, "Server-specific params" (ggml-org/llama.cpp @ 00dc8057ab28);
# --draft-max / --draft-min are listed there as removed.
LLAMA_CPP_FLAGS = {"--spec-type", "--spec-draft-model", "-md", "--model-draft", "--spec-draft-n-max",
                   "--spec-draft-n-min", "--spec-draft-p-min", "--draft-p-min", "--spec-ngram-simple-size-n",
                   "--spec-ngram-simple-size-m"}
LLAMA_CPP_TYPES = {"none", "draft-simple", "draft-eagle3", "draft-mtp", "ngram-simple", "ngram-map-k", "ngram-mod",
                   "ngram-cache"}


def flat(base: float, slope: float = 0.0) -> LatencyCurve:
    n = (1, 2, 4, 8, 16, 32, 64)
    return LatencyCurve(256, n, tuple(base + slope * (k - 1) for k in n))


def tree_profile() -> Profile:
    """A target whose verification width is free and a cheap drafter with good second choices:
    the unrestricted optimum is a tree."""
    models = (
        ModelEntry("target", "default", "fp", dtype="bfloat16", role="target", latency=(flat(20.0, 0.01),)),
        ModelEntry("model-draft", "model:/models/draft-30m", "fp", dtype="bfloat16", latency=(flat(1.0),)),
        ModelEntry("layerskip-20", "layerskip:20", "fp", dtype="bfloat16", base="target", latency=(flat(14.0, 0.01),)),
    )
    acceptance = (
        AcceptanceEntry("model-draft", "target", 0.0, 0.55, 8, rank_accept=(0.55, 0.2, 0.1, 0.05)),
        AcceptanceEntry("layerskip-20", "target", 0.0, 0.6, 8, rank_accept=(0.6, 0.1)),
        AcceptanceEntry("ngram-3", "target", 0.0, 0.4, 8, rank_accept=(0.3,)),
    )
    return Profile(DeviceInfo("cpu", "test cpu", "cpu"), models, acceptance, (RetrievalEntry("ngram-3", "ngram:3", 0.02),))


def layerskip_profile() -> Profile:
    models = (ModelEntry("target", "default", "fp", dtype="bfloat16", role="target", latency=(flat(50.0, 0.5),)),
              ModelEntry("layerskip-10", "layerskip:10", "fp", dtype="bfloat16", base="target", latency=(flat(15.0),)))
    acceptance = (AcceptanceEntry("layerskip-10", "target", 0.0, 0.7, 8, rank_accept=(0.7,)),)
    return Profile(DeviceInfo("cpu", "test cpu", "cpu"), models, acceptance)


def check_flags(text: str, allowed: set[str]) -> dict[str, str]:
    tokens = shlex.split(text)
    assert len(tokens) % 2 == 0, tokens
    pairs = dict(zip(tokens[::2], tokens[1::2]))
    assert set(pairs) <= allowed, set(pairs) - allowed
    return pairs


def check_config(engine: str, text: str) -> None:
    """The engine's config parses and names only documented fields."""
    if engine == "vllm":
        config = json.loads(text)
        if config is not None:
            assert set(config) <= VLLM_FIELDS and config["method"] in VLLM_METHODS
            assert config["num_speculative_tokens"] >= 1
    elif engine == "sglang":
        flags = check_flags(text, SGLANG_FLAGS)
        if flags:
            assert flags["--speculative-algorithm"] in SGLANG_ALGORITHMS
    elif engine == "transformers":
        config = json.loads(text)
        assert set(config) <= {"generate_kwargs", "assistant_generation_config"}
        assert set(config["generate_kwargs"]) <= TRANSFORMERS_KWARGS
        assert set(config.get("assistant_generation_config", {})) <= TRANSFORMERS_ASSISTANT
    else:
        flags = check_flags(text, LLAMA_CPP_FLAGS)
        if flags:
            assert flags["--spec-type"] in LLAMA_CPP_TYPES


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("profile", [tree_profile(), layerskip_profile()], ids=["tree", "layerskip"])
def test_export_parses_and_uses_documented_names(engine, profile):
    result = export_plan(profile, engine)
    check_config(engine, result.config)
    assert result.loss >= -1e-9  # the engine's space is a subset of the unrestricted one


def test_transformers_names_exist_in_the_installed_generation_config():
    from transformers import GenerationConfig

    config = GenerationConfig()
    for name in (TRANSFORMERS_KWARGS - {"assistant_model"}) | TRANSFORMERS_ASSISTANT:
        assert hasattr(config, name), name


def test_a_tree_plan_exports_to_vllm_as_the_best_sequence_with_its_loss():
    profile = tree_profile()
    unrestricted = solve_plan(profile, PlanOptions())
    assert unrestricted.plan.stages[-1].shape.kind == "tree"
    result = export_plan(profile, "vllm")
    assert result.stage.shape.kind == "sequence"
    best_sequence = solve_plan(profile, PlanOptions(shapes=("sequence",), max_stages=1))
    expected = best_sequence.plan.predicted.ms_per_token  # model-draft and ngram are both vLLM methods
    assert result.restricted.plan.predicted.ms_per_token == pytest.approx(expected)
    assert result.loss > 0.01
    config = json.loads(result.config)
    assert config["num_speculative_tokens"] == result.stage.shape.gamma
    lines = describe(result)
    assert any(line.startswith("predicted loss: +") for line in lines)
    assert any("layerskip-20" in line and "left out" in line for line in lines)


def test_sglang_keeps_the_tree():
    result = export_plan(tree_profile(), "sglang")
    assert result.stage.shape.kind == "tree" and result.loss == pytest.approx(0.0, abs=1e-9)
    flags = check_flags(result.config, SGLANG_FLAGS)
    assert flags["--speculative-algorithm"] == "STANDALONE"
    assert int(flags["--speculative-num-draft-tokens"]) == len(result.stage.shape.parents)
    assert int(flags["--speculative-eagle-topk"]) > 1


def test_layer_skipping_exports_to_transformers_early_exit_and_to_vllm_as_plain():
    transformers = export_plan(layerskip_profile(), "transformers")
    config = json.loads(transformers.config)
    assert config["generate_kwargs"] == {"assistant_early_exit": 10}
    assert config["assistant_generation_config"]["num_assistant_tokens"] == transformers.stage.shape.gamma
    vllm = export_plan(layerskip_profile(), "vllm")
    assert vllm.stage is None and json.loads(vllm.config) is None and vllm.loss > 0
    assert any("serve without speculation" in note for note in vllm.notes)


def test_unknown_engine_is_a_one_line_error_listing_the_known():
    with pytest.raises(PlanError) as error:
        export_plan(tree_profile(), "tgi")
    assert "\n" not in str(error.value) and all(name in str(error.value) for name in ENGINES)


@pytest.fixture
def plan_file(tmp_path):
    profile = tree_profile()
    save_profile(profile, tmp_path / "profile.yaml")
    result = solve_plan(profile, PlanOptions(), profile_path="profile.yaml",
                        profile_sha256=file_sha256(tmp_path / "profile.yaml"))
    save_plan(result.plan, tmp_path / "plan.yaml")
    return tmp_path / "plan.yaml"


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_cli_export_prints_the_config_on_stdout(engine, plan_file, capsys):
    assert main(["export", str(plan_file), "--engine", engine]) == 0
    captured = capsys.readouterr()
    check_config(engine, captured.out.strip())
    assert "predicted loss" in captured.err
    assert main(["export", str(plan_file), "--engine", engine, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    check_config(engine, record["config"])
    assert record["loss"] >= 0 and record["engine"] == engine


def test_cli_unknown_engine_exits_2_with_one_line(plan_file, capsys):
    assert main(["export", str(plan_file), "--engine", "tgi"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "known: vllm, sglang, transformers, llama.cpp" in lines[0]
