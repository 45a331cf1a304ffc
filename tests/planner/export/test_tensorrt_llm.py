"""``specplan export --engine tensorrt-llm``: the YAML file ``trtllm-serve --extra_llm_api_options``
reads, held to TensorRT-LLM's interface as recorded from its source (names, types, validator rules),
for each drafter TensorRT-LLM runs, plain decoding and a schedule per batch size; and a check that
refuses what TensorRT-LLM's own validators refuse."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from specplan.cli.main import main
from specplan.core.parents import tree_depth
from specplan.core.plan import save_plan
from specplan.core.profile import AcceptanceEntry, DeviceInfo, ModelEntry, Profile, save_profile
from specplan.planner import PlanOptions, solve_plan
from specplan.planner.export import export_plan
from specplan.planner.export.engines import eagle_choices
from specplan.planner.export.models import ModelNames
from specplan.planner.export.pasted import pasted_export
from specplan.planner.export.schedule import export_schedule
from specplan.planner.schedule import with_schedule

from tests.engine_records import (TRTLLM_RULES, check_config, load_record, tensorrt_llm_file, tensorrt_llm_problems,
                                  unknown_names)
from tests.planner.export.test_plan import flat, layerskip_profile, tree_profile
from tests.planner.export.test_schedule import BATCHES, OPTIONS, ngram_profile

pytestmark = pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")

HEADER = "# save as extra.yaml, then: trtllm-serve m --extra_llm_api_options extra.yaml\n"


def speculative_config(text: str) -> dict:
    return tensorrt_llm_file(text)[1].get("speculative_config") or {}


def file_with(config: dict) -> str:
    return HEADER + yaml.safe_dump({"speculative_config": config}, sort_keys=False)


NGRAM = {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 3}


def test_every_validator_rule_of_the_record_has_its_check():
    record = load_record("tensorrt-llm")
    assert set(record.columns["validator"]) == set(TRTLLM_RULES)
    classes = {cls for chain in record.columns["decoding_type"].values() for cls in chain.split("<")}
    assert {line.split()[0] for line in record.columns["validator"].values()} <= classes
    assert (record.origin, record.version) == ("NVIDIA/TensorRT-LLM", "0004396720054fd8e205cbf616f21f0b57c6b412")


@pytest.mark.parametrize("text, unknown", [
    (file_with({**NGRAM, "prompt_lookup_num_tokens": 4}), {"field": {"prompt_lookup_num_tokens"}}),  # an old name
    (file_with({**NGRAM, "eagle_choices": [[0]]}), {"field": {"eagle_choices"}}),  # another class's field
    (file_with({"decoding_type": "DraftTarget", "max_draft_len": 2, "speculative_model": "d"}),
     {"decoding_type": {"DraftTarget"}, "field": {"decoding_type", "max_draft_len", "speculative_model"}}),
    (HEADER + "speculative_configs: {}\n", {"top-level": {"speculative_configs"}}),
    (HEADER.replace("--extra_llm_api_options", "--extra-llm-api-options") + "{}\n",
     {"cli": {"--extra-llm-api-options"}}),
])
def test_a_bogus_name_is_refused(text, unknown):
    assert unknown_names("tensorrt-llm", text) == unknown
    assert tensorrt_llm_problems(text)


@pytest.mark.parametrize("config, refused", [
    ({**NGRAM, "max_draft_len": 0}, "ngram_drafts"),
    ({**NGRAM, "max_matching_ngram_size": 0}, "max_matching_ngram_size"),
    ({**NGRAM, "is_public_pool": "no"}, "is_public_pool"),
    ({**NGRAM, "draft_len_schedule": {1: 4, 8: 5}}, "schedule_at_most_max_draft_len"),
    ({**NGRAM, "draft_len_schedule": {2: 3, 8: 1}}, "schedule_smallest_key_is_max_draft_len"),
    ({**NGRAM, "max_draft_len": None, "draft_len_schedule": {0: 4}}, "schedule_keys_and_lengths"),
    ({**NGRAM, "draft_len_schedule": {4: 4}, "max_concurrency": 8}, "concurrency_or_schedule"),
    ({"decoding_type": "Draft_Target", "max_draft_len": 3}, "draft_target_drafts"),
    ({"decoding_type": "Eagle3", "max_draft_len": 2, "speculative_model": "h", "eagle_choices": [[0], [1, 0]]},
     "eagle_choices_connected"),
    ({"decoding_type": "Eagle3", "max_draft_len": 2}, "eagle_needs_model"),
])
def test_a_type_or_a_validator_rule_broken_is_refused(config, refused):
    problems = tensorrt_llm_problems(file_with(config))
    assert any(problem.startswith(refused) for problem in problems), problems


def test_the_alias_of_speculative_model_is_accepted():
    text = file_with({"decoding_type": "Draft_Target", "max_draft_len": 3, "speculative_model_dir": "/m/d"})
    assert tensorrt_llm_problems(text) == []


def test_prompt_lookup_exports_to_ngram_with_a_pool_per_request():
    profile = replace(tree_profile(), models=tuple(m for m in tree_profile().models if m.id != "model-draft"))
    result = export_plan(profile, "tensorrt-llm")
    check_config("tensorrt-llm", result.config)
    assert result.stage.drafter == "ngram-3" and result.stage.shape.kind == "sequence"  # no n-gram trees
    assert speculative_config(result.config) == {
        "decoding_type": "NGram", "max_draft_len": result.stage.shape.gamma, "max_matching_ngram_size": 3,
        "is_use_oldest": False, "is_public_pool": False}
    assert result.config.startswith("# save as extra.yaml, then: trtllm-serve HuggingFaceTB/SmolLM2-135M-Instruct ")
    assert any("max_matching_ngram_size" in note for note in result.notes)
    assert any("NVIDIA GPUs only" in note for note in result.notes)  # a cpu profile
    assert any("000439672005" in note and "cannot be installed" in note for note in result.notes)


def test_a_draft_model_exports_to_draft_target_as_the_best_chain():
    result = export_plan(tree_profile(), "tensorrt-llm")
    check_config("tensorrt-llm", result.config)
    best_chain = solve_plan(tree_profile(), PlanOptions(shapes=("sequence",), max_stages=1))
    assert result.restricted.plan.predicted.ms_per_token == pytest.approx(best_chain.plan.predicted.ms_per_token)
    assert result.stage.shape.kind == "sequence" and result.loss > 0.01  # the unrestricted plan is a tree
    assert speculative_config(result.config) == {"decoding_type": "Draft_Target", "max_draft_len":
                                                 result.stage.shape.gamma, "speculative_model": "/models/draft-30m"}
    assert any(line.startswith("layerskip-20") for line in result.excluded)


def test_a_gguf_draft_model_is_one_specplan_cannot_hand_to_tensorrt_llm():
    profile = replace(tree_profile(), models=tuple(replace(m, source="model:/m/draft.gguf") if m.id == "model-draft"
                                                   else m for m in tree_profile().models))
    result = export_plan(profile, "tensorrt-llm")
    assert any(line.startswith("model-draft") and "GGUF" in line for line in result.unwritable)


def head_profile() -> Profile:
    models = (ModelEntry("target", "default", "fp", dtype="float32", role="target", latency=(flat(40.0),)),
              ModelEntry("head-h", "head:/heads/h3", "fp", dtype="float32", base="target", latency=(flat(2.0),)))
    acceptance = (AcceptanceEntry("head-h", "target", 0.0, 0.7, 8, rank_accept=(0.7, 0.2)),)
    return Profile(DeviceInfo("cuda", "test gpu", "h100-sxm"), models, acceptance)


def test_an_eagle3_head_tree_exports_as_eagle_choices():
    names = ModelNames("default", "cuda", heads=(("/heads/h3", "/ckpt/h3-eagle3"),))
    result = export_plan(head_profile(), "tensorrt-llm", names=names)
    check_config("tensorrt-llm", result.config)
    parents = result.stage.shape.parents
    assert result.stage.shape.kind == "tree" and result.loss == pytest.approx(0.0, abs=1e-9)
    config = speculative_config(result.config)
    assert config["decoding_type"] == "Eagle3" and config["speculative_model"] == "/ckpt/h3-eagle3"
    assert config["eagle_choices"] == eagle_choices(parents) and len(config["eagle_choices"]) == len(parents) - 1
    assert config["max_draft_len"] == tree_depth(parents) and config["eagle3_layers_to_capture"] == [-1]
    assert any("eagle_choices" in note and "1.4" in note for note in result.notes)
    assert not any("NVIDIA GPUs only" in note for note in result.notes)  # a GPU profile


def test_a_head_specplan_cannot_write_as_eagle3_is_left_out_with_its_reason():
    result = export_plan(head_profile(), "tensorrt-llm")  # no EAGLE-3 checkpoint planned for it
    assert result.stage is None and any(line.startswith("head-h") and "EAGLE-3" in line for line in result.unwritable)


def test_eagle_choices_are_the_sibling_ranks_on_each_path():
    assert eagle_choices((-1, 0, 0, 1, 1, 2, 3)) == [[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]]


def test_plain_decoding_exports_an_empty_file():
    result = export_plan(layerskip_profile(), "tensorrt-llm")
    assert result.stage is None and tensorrt_llm_file(result.config)[1] == {}
    check_config("tensorrt-llm", result.config)
    assert any("serves without speculation" in note for note in result.notes)


def trtllm_draft_length(schedule: dict[int, int], batch: int) -> int:
    """The draft length TensorRT-LLM reads from ``draft_len_schedule`` at ``batch`` (the field's own description:
    the smallest key at or above the batch; above the largest key, none)."""
    return next((schedule[key] for key in sorted(schedule) if batch <= key), 0)


def test_the_schedule_per_batch_size_is_draft_len_schedule():
    pasted = pasted_export(ngram_profile(), "tensorrt-llm", OPTIONS, names=ModelNames("m", "cuda"))
    check_config("tensorrt-llm", pasted.config)
    config = speculative_config(pasted.config)
    schedule = config["draft_len_schedule"]
    assert pasted.schedule.per_batch and config["max_draft_len"] == schedule[min(schedule)] == max(schedule.values())
    for row in pasted.schedule.rows:  # what TensorRT-LLM drafts at each batch is what the schedule chose
        assert trtllm_draft_length(schedule, row.batch) == (row.stage.shape.gamma if row.stage else 0)
    assert trtllm_draft_length(schedule, 10 * BATCHES[-1]) == 0  # plain decoding wins at the largest batch
    assert any(line.strip().startswith("draft_len_schedule:") for line in pasted.schedule.lines())


def test_no_batch_is_scheduled_more_draft_tokens_than_batch_one():
    result = export_schedule(ngram_profile(), "tensorrt-llm", OPTIONS)
    first = result.rows[0].stage.shape.gamma
    assert all(tokens <= first for _, _, tokens in result.ranges)


def test_cli_refuses_a_misspelt_engine_in_one_line(tmp_path, capsys):
    profile = ngram_profile()
    save_profile(profile, tmp_path / "profile.yaml")
    plan, _ = with_schedule(solve_plan(profile, OPTIONS, profile_path="profile.yaml").plan, profile, OPTIONS)
    save_plan(plan, tmp_path / "plan.yaml")
    assert main(["export", str(tmp_path / "plan.yaml"), "--engine", "tensorrt_llm"]) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert captured.out == "" and len(lines) == 1 and "tensorrt-llm" in lines[0] and "Traceback" not in lines[0]
