"""The real default model (SmolLM2-135M-Instruct), float32: the static cache and compiled steps
are lossless under greedy.

Chains (prompt lookup, gamma 4), a Token-Recycling tree and a layer-skip tree must commit
exactly the tokens of plain greedy decoding with the eager runtime (the dynamic cache). The
compiled runtime uses one bucket of 16 here, so the target compiles one graph (minutes on 2
CPU cores); the layer-skip tree runs on the static cache only, to keep the check short.
"""

from __future__ import annotations

import pytest
import torch

from specplan.core.plan import StageShape
from specplan.core.runtime_modes import RuntimeMode
from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.prompts import spec_bench_split, stratified
from specplan.runtime.compile import compiled
from specplan.runtime.build import build_tree_drafter, eos_ids
from specplan.models.chat import encode_prompt
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.models.load import load_model

CPU = torch.device("cpu")
NEW_TOKENS = 32
RECYCLE_TREE = StageShape("tree", parents=(-1, 0, 0, 0, 1, 1, 2, 4, 4, 7))

pytestmark = [pytest.mark.slow, pytest.mark.realmodel, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def real_target(default_model_dir):
    return load_model("default", "float32")


def prompts_and_references(target) -> list[tuple[list[int], tuple[int, ...]]]:
    """Three evaluation prompts (writing, translation, summarization) and their eager greedy outputs."""
    plain = SpeculativeEngine(target.model, CPU, eos_ids(target))
    assert plain.target.cache_kind == "dynamic"
    chosen = [stratified(spec_bench_split("evaluation"), 13)[index] for index in (0, 8, 9)]
    pairs = []
    for prompt in chosen:
        ids = encode_prompt(target.tokenizer, prompt.text)
        pairs.append((ids, plain.generate(ids, NEW_TOKENS, SamplingConfig()).token_ids))
    return pairs


def check(engine: SpeculativeEngine, pairs, name: str) -> None:
    for ids, reference in pairs:
        result = engine.generate(ids, NEW_TOKENS, SamplingConfig())
        assert result.token_ids == reference, name


def test_fp32_static_and_compiled_runtimes_are_token_identical(real_target, monkeypatch):
    pairs = prompts_and_references(real_target)
    eos = eos_ids(real_target)
    static, compiled_mode = RuntimeMode("static"), RuntimeMode("compiled")
    layerskip = build_tree_drafter(parse_drafter_spec("layerskip:20"), real_target, CPU, runtime=static)
    check(SpeculativeEngine(real_target.model, CPU, eos, runtime=static), pairs, "static plain")
    check(SpeculativeEngine(real_target.model, CPU, eos, layerskip, tree=StageShape("tree", budget=6, depth=2, dynamic=True), runtime=static),
          pairs, "static layerskip tree")
    monkeypatch.setattr(compiled, "BUCKETS", (16,))
    engines = {
        "compiled plain": SpeculativeEngine(real_target.model, CPU, eos, runtime=compiled_mode),
        "compiled ngram chain": SpeculativeEngine(real_target.model, CPU, eos, NgramDrafter(3), gamma=4,
                                                  runtime=compiled_mode),
        "compiled recycle tree": SpeculativeEngine(real_target.model, CPU, eos, RecycleDrafter(), tree=RECYCLE_TREE,
                                                   runtime=compiled_mode),
    }
    for name, engine in engines.items():
        check(engine, pairs, name)
        assert engine.target.step.calls > 0
