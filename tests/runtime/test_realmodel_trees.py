"""The real default model (SmolLM2-135M-Instruct), float32: tree stages are lossless under greedy.

Static (a DP-like parent array) and dynamic (best-first) layer-skip trees must commit exactly
the tokens of plain greedy decoding on two evaluation prompts. Trees are kept small (depth 2)
so that the check stays near a minute on 2 CPU cores; grafts are checked on tiny models.
"""

from __future__ import annotations

import pytest
import torch

from specplan.core.plan import StageShape
from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.prompts import spec_bench_split, stratified
from specplan.runtime.build import build_tree_drafter, eos_ids
from specplan.models.chat import encode_prompt
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import SpeculativeEngine
from specplan.models.load import load_model

CPU = torch.device("cpu")
NEW_TOKENS = 32


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def real_target(default_model_dir):
    return load_model("default", "float32")


def test_fp32_tree_stages_are_token_identical_to_plain_greedy(real_target):
    prompts = stratified(spec_bench_split("evaluation"), 13)[8:10]  # translation, summarization
    network = build_tree_drafter(parse_drafter_spec("layerskip:20"), real_target, CPU).session.model
    eos = eos_ids(real_target)

    def tree_drafter():
        return build_tree_drafter(parse_drafter_spec("layerskip:20"), real_target, CPU, network)

    engines = {
        "static": SpeculativeEngine(real_target.model, CPU, eos, tree_drafter(), tree=StageShape("tree", parents=(-1, 0, 0, 0, 1, 2))),
        "dynamic": SpeculativeEngine(real_target.model, CPU, eos, tree_drafter(), tree=StageShape("tree", budget=6, depth=2, dynamic=True)),
    }
    plain = SpeculativeEngine(real_target.model, CPU, eos)
    for prompt in prompts:
        prompt_ids = encode_prompt(real_target.tokenizer, prompt.text)
        reference = plain.generate(prompt_ids, NEW_TOKENS, SamplingConfig()).token_ids
        for name, engine in engines.items():
            result = engine.generate(prompt_ids, NEW_TOKENS, SamplingConfig())
            assert result.token_ids == reference, (name, prompt.prompt_id)
            assert max(result.committed_per_forward) > 1, name  # the tree was accepted somewhere
