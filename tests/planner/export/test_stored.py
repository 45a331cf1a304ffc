"""Every stored profile (profiles/*/profile.yaml, found when the tests are collected, so a new
folder is covered without a change here) exported for every engine: the command ``specplan
export`` prints names only what the engine's recorded or installed interface has (for
TensorRT-LLM also with the recorded types and validator rules), and so does every command in
docs/exports.md (written by measurements/export_table.py)."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from specplan.core.profile import load_profile
from specplan.planner.export import describe
from specplan.planner.export.engines import ENGINES, tree_numbers
from specplan.planner.export.pasted import not_exportable

from tests.engine_records import check_config, tensorrt_llm_file

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "measurements"))
from export_table import export_stored, render, stored_profiles  # noqa: E402

PROFILES = stored_profiles(ROOT)
pytestmark = pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")


def draft_tokens(engine: str, config: str) -> int:
    """The draft length the command asks for (0: no speculative option)."""
    if engine == "transformers":
        found = re.search(r"num_assistant_tokens = (\d+)|prompt_lookup_num_tokens=(\d+)", config)
        return int(found.group(1) or found.group(2)) if found else 0
    if engine == "tensorrt-llm":  # a tree: one draft token per path of eagle_choices
        speculative = tensorrt_llm_file(config)[1].get("speculative_config") or {}
        return len(speculative["eagle_choices"]) if "eagle_choices" in speculative else speculative.get("max_draft_len", 0)
    words = shlex.split(config)

    def value(flag: str, default: str) -> str:
        return words[words.index(flag) + 1] if flag in words else default

    if engine == "vllm":
        return json.loads(value("--speculative-config", '{"num_speculative_tokens": 0}'))["num_speculative_tokens"]
    if engine == "sglang":
        return int(value("--speculative-num-draft-tokens", "1")) - 1
    return int(value("--spec-draft-n-max", value("--spec-ngram-simple-size-m", "0")))


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("path", PROFILES, ids=[path.parent.name for path in PROFILES])
def test_every_stored_profile_exports_a_command_the_engine_takes(path, engine):
    profile = load_profile(path)
    reason = not_exportable(profile)
    if reason:
        pytest.skip(f"{path.parent.name}: {reason}")
    pasted = export_stored(path, engine)
    check_config(engine, pasted.config)
    result = pasted.result
    assert result.loss >= -1e-9  # the engine's plans are a subset of the unrestricted ones
    assert all("\n" not in line for line in describe(result))
    if result.stage is None:
        assert draft_tokens(engine, pasted.config) == 0
    elif pasted.schedule is None or not pasted.schedule.ranges:
        assert draft_tokens(engine, pasted.config) == tree_numbers(result.stage)[2] - 1


def test_the_stored_profiles_are_found():
    assert ROOT / "profiles" / "cpu" / "profile.yaml" in PROFILES
    assert all(path.name == "profile.yaml" for path in PROFILES)


def test_a_latency_only_profile_is_skipped_with_its_reason():
    latency_only = load_profile(ROOT / "profiles" / "cpu-latency-only" / "qwen2.5-1.5b.yaml")
    assert "latency-only" in not_exportable(latency_only) and "arch:qwen2.5-1.5b" in not_exportable(latency_only)
    assert not_exportable(load_profile(ROOT / "profiles" / "cpu" / "profile.yaml")) == ""
    page = render([ROOT / "profiles" / "cpu-latency-only" / "qwen2.5-1.5b.yaml"])
    assert "Skipped: latency-only profile" in page and "```" not in page


def commands_on_page(text: str) -> list[tuple[str, str]]:
    """(engine, command) of every code block under an engine's heading in docs/exports.md."""
    found = []
    for engine, block in re.findall(r"^### (\S+)\n\n```\w+\n(.*?)\n```", text, flags=re.MULTILINE | re.DOTALL):
        found.append((engine, block))
    return found


def test_every_command_in_docs_exports_takes_the_engine():
    page = (ROOT / "docs" / "exports.md").read_text()
    commands = commands_on_page(page)
    assert {engine for engine, _ in commands} == set(ENGINES)
    for engine, command in commands:
        check_config(engine, command)
    assert "## profiles/cpu/profile.yaml" in page
