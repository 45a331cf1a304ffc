"""``specplan export``: engine configs that parse, use only documented field names, and say what
the engine's restrictions cost against the unrestricted plan."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest

from specplan.cli.main import main
from specplan.core.errors import PlanError
from specplan.core.plan import save_plan
from specplan.planner import PlanOptions, solve_plan
from specplan.planner.export import describe, export_plan
from specplan.planner.export.engines import ENGINES, sglang_fits, tree_numbers
from specplan.planner.export.models import ModelNames
from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.profile import (AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry,
                              save_profile)
from specplan.core.yamlio import file_sha256

from tests.engine_records import RECORDS, check_config, load_record, transformers_names, unknown_names

pytestmark = pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")  # pairs the profiles omit


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


@pytest.mark.parametrize("engine", sorted(ENGINES))
@pytest.mark.parametrize("profile", [tree_profile(), layerskip_profile()], ids=["tree", "layerskip"])
def test_export_parses_and_uses_documented_names(engine, profile):
    result = export_plan(profile, engine)
    check_config(engine, result.config)
    assert result.loss >= -1e-9  # the engine's space is a subset of the unrestricted one


@pytest.mark.parametrize("engine", sorted(RECORDS))
def test_each_record_names_its_repository_and_full_commit_or_its_package_version(engine):
    file, origin, version = RECORDS[engine]
    record = load_record(engine)
    assert (record.origin, record.version) == (origin, version)
    if "/" in origin:  # written by hand from a repository at a commit
        assert len(version) == 40 and version[:12] in file
    else:  # generated from an installed package
        assert file == f"{origin}-{version}.txt"


@pytest.mark.parametrize("engine, command, unknown", [
    ("sglang", "python -m sglang.launch_server --model-path m --speculative-algorithm NGRAM "
               "--speculative-ngram-max-match-window-size 5", {"flag": {"--speculative-ngram-max-match-window-size"}}),
    ("sglang", "python -m sglang.launch_server --model-path m --speculative-algorithm LOOKAHEAD",
     {"algorithm": {"LOOKAHEAD"}}),
    ("vllm", "vllm serve m --speculative-config '{\"method\": \"ngram\", \"ngram_window\": 3}'",
     {"field": {"ngram_window"}}),
    ("llama.cpp", "llama-server -m t.gguf --spec-draft-max 4", {"flag": {"--spec-draft-max"}}),
    ("tensorrt-llm", "# save as extra.yaml, then: trtllm-serve m --extra_llm_api_options extra.yaml\n"
                     "speculative_config: {decoding_type: NGram, max_draft_len: 3, prompt_lookup_num_tokens: 3}",
     {"field": {"prompt_lookup_num_tokens"}}),
])
def test_a_name_missing_from_the_record_is_reported(engine, command, unknown):
    assert unknown_names(engine, command) == unknown


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
    words = shlex.split(result.config)
    config = json.loads(words[words.index("--speculative-config") + 1])
    assert config["num_speculative_tokens"] == result.stage.shape.gamma
    lines = describe(result)
    assert any(line.startswith("predicted loss: +") for line in lines)
    assert any("layerskip-20" in line and "the engine cannot run it" in line for line in lines)


def test_sglang_keeps_the_tree():
    result = export_plan(tree_profile(), "sglang")
    assert result.stage.shape.kind == "tree"
    assert result.loss == pytest.approx(0.0, abs=1e-9) or result.limits  # only SGLang's candidate bound costs
    check_config("sglang", result.config)
    flags = dict(zip(shlex.split(result.config)[3::2], shlex.split(result.config)[4::2]))
    assert flags["--speculative-algorithm"] == "STANDALONE"
    assert int(flags["--speculative-num-draft-tokens"]) == len(result.stage.shape.parents)
    assert int(flags["--speculative-eagle-topk"]) > 1


def test_layer_skipping_exports_to_transformers_early_exit_and_to_vllm_as_plain():
    transformers = export_plan(layerskip_profile(), "transformers")
    keywords, attributes = transformers_names(transformers.config)
    assert "assistant_early_exit" in keywords and "assistant_early_exit=10" in transformers.config
    assert f"model.generation_config.num_assistant_tokens = {transformers.stage.shape.gamma}" in transformers.config
    assert "num_assistant_tokens" in attributes and any("batch size 1" in note for note in transformers.notes)
    vllm = export_plan(layerskip_profile(), "vllm")
    assert vllm.stage is None and vllm.config == "vllm serve HuggingFaceTB/SmolLM2-135M-Instruct" and vllm.loss > 0
    assert "--speculative-config" not in vllm.config
    assert any("serves without speculation" in note for note in vllm.notes)


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
    assert {"left_out", "not_writable_yet", "engine_limits", "notes"} <= set(record)


def test_cli_unknown_engine_exits_2_with_one_line(plan_file, capsys):
    assert main(["export", str(plan_file), "--engine", "tgi"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "known: vllm, sglang, transformers, llama.cpp" in lines[0]


def test_sglang_candidate_bound_is_enforced_in_the_re_solve_with_its_loss():
    """The issue's case: 64 draft tokens, 4 steps, top-k 4 leave 52 candidates for 63 drafts."""
    options = PlanOptions(max_depth=4, gammas=(1, 2, 3, 4))
    result = export_plan(tree_profile(), "sglang", options)
    steps, topk, tokens = tree_numbers(result.stage)
    assert tokens - 1 <= topk + (steps - 1) * topk ** 2 and sglang_fits(result.stage)
    assert len(result.limits) == 1 and "63 of 52" in result.limits[0] and "ms/token" in result.limits[0]
    assert any(line.startswith("engine limit: ") for line in describe(result))


def test_sglang_ngram_states_the_shared_trie_and_the_cpu_device():
    profile = replace(tree_profile(), models=tuple(m for m in tree_profile().models if m.id != "model-draft"))
    ngram = export_plan(profile, "sglang")
    assert "--device cpu" in ngram.config and "NGRAM" in ngram.config
    assert any("trie" in note for note in ngram.notes) and any("--device cpu" in note for note in ngram.notes)
    assert "window" not in ngram.config and ngram.stage is not None


def cache_profile(cache_accept: float = 0.8) -> Profile:
    """A cache drafter (earlier outputs) that accepts far more than prompt lookup does (by default)."""
    models = (ModelEntry("target", "default", "fp", dtype="bfloat16", role="target", latency=(flat(20.0, 0.5),)),)
    acceptance = (AcceptanceEntry("cache", "target", 0.0, cache_accept, 8, rank_accept=(cache_accept,)),
                  AcceptanceEntry("ngram-3", "target", 0.0, 0.4, 8, rank_accept=(0.4,)))
    retrieval = (RetrievalEntry("cache", "cache", 0.05), RetrievalEntry("ngram-3", "ngram:3", 0.05))
    return Profile(DeviceInfo("cpu", "test cpu", "cpu"), models, acceptance, retrieval)


def test_a_cache_drafter_exports_to_vllm_suffix_decoding_with_its_cap_and_a_note():
    result = export_plan(cache_profile(), "vllm")
    assert result.stage is not None and result.stage.drafter == "cache"
    words = shlex.split(result.config)
    config = json.loads(words[words.index("--speculative-config") + 1])
    assert config == {"method": "suffix", "num_speculative_tokens": result.stage.shape.gamma}
    assert any("suffix decoding" in note and "arctic-inference" in note for note in result.notes)
    check_config("vllm", result.config)
    assert "cache" in " ".join(export_plan(cache_profile(), "sglang").excluded)  # SGLang has no such method


def test_a_stand_in_method_must_clearly_beat_the_drafters_the_engine_runs_as_measured():
    marginal = export_plan(cache_profile(cache_accept=0.41), "vllm")
    assert marginal.stage is not None and marginal.stage.drafter == "ngram-3"
    assert any(line.startswith("cache: vllm would run it only through a different method") for line in marginal.excluded)
    exact = solve_plan(replace(cache_profile(0.41), retrieval=cache_profile().retrieval[1:]), PlanOptions(
        shapes=("sequence",), max_stages=1))
    assert marginal.restricted.plan.predicted.ms_per_token == pytest.approx(exact.plan.predicted.ms_per_token)


def test_vllm_on_a_cpu_says_how_its_cpu_build_starts_and_binds_every_core():
    result = export_plan(tree_profile(), "vllm")  # a cpu profile
    assert any("vllm.entrypoints.openai.api_server" in note and "VLLM_CPU_OMP_THREADS_BIND" in note
               for note in result.notes)


def test_transformers_passes_a_loaded_assistant_model_not_a_name():
    result = export_plan(tree_profile(), "transformers")
    assert result.stage is not None and parse_drafter_spec(_drafter_source(result)).kind == "model"
    assert "assistant = AutoModelForCausalLM.from_pretrained('/models/draft-30m')" in result.config
    assert "assistant_model=assistant" in result.config and "assistant_model='" not in result.config
    assert "assistant.generation_config.num_assistant_tokens" in result.config


def _drafter_source(result) -> str:
    profile = tree_profile()
    model = profile.model(result.stage.drafter)
    return model.source if model is not None else profile.retrieval_entry(result.stage.drafter).source


def test_engine_gaps_are_kept_apart_from_what_specplan_cannot_write_yet():
    profile = replace(tree_profile(), models=tree_profile().models + (
        ModelEntry("head-h", "head:/heads/h", "fp", dtype="bfloat16", base="target", latency=(flat(2.0),)),))
    llama = export_plan(profile, "llama.cpp")
    assert any(line.startswith("model-draft") and "GGUF" in line for line in llama.unwritable)
    assert any(line.startswith("head-h") and "EAGLE-3" in line for line in llama.unwritable)
    assert any(line.startswith("layerskip-20") for line in llama.excluded)
    lines = describe(llama)
    assert any(line.startswith("left out, specplan cannot write it for llama.cpp yet: head-h") for line in lines)
    vllm = export_plan(profile, "vllm")
    assert any(line.startswith("head-h") for line in vllm.unwritable) and not any("head" in x for x in vllm.excluded)
    transformers = export_plan(profile, "transformers")
    assert any(line.startswith("head-h") for line in transformers.excluded)


def test_a_gguf_draft_model_exports_to_llama_server():
    names = ModelNames("default", "cpu", (("default", "/m/t.gguf"), ("/models/draft-30m", "/m/d.gguf")))
    result = export_plan(tree_profile(), "llama.cpp", names=names)
    assert result.config.startswith("llama-server -m /m/t.gguf --spec-type draft-simple --spec-draft-model /m/d.gguf")
    check_config("llama.cpp", result.config)
