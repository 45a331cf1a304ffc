"""The real default model (SmolLM2-135M-Instruct), float32: a three-level hierarchy
(Token Recycling tree -> the target's first 26 layers -> the target) commits exactly the
tokens of plain greedy decoding, and every stage reports its own totals."""

from __future__ import annotations

import pytest
import torch

from specplan.core.plan import StageShape
from specplan.core.prompts import spec_bench_split, stratified
from specplan.runtime.build import eos_ids
from specplan.models.chat import encode_prompt
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.hierarchy import HierarchyDrafter
from specplan.runtime.drafters.layerskip import layer_skip_view, parse_kept_layers
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.models.load import load_model
from specplan.runtime.session import ModelSession
from specplan.runtime.stage import StageRunner

CPU = torch.device("cpu")
NEW_TOKENS = 24

pytestmark = pytest.mark.usefixtures("one_thread")


def test_fp32_three_level_hierarchy_is_token_identical_to_plain_greedy(default_model_dir):
    target = load_model("default", "float32")
    eos = eos_ids(target)
    middle = layer_skip_view(target.model, parse_kept_layers("26", target.model.config.num_hidden_layers))
    stage = StageRunner(ModelSession(middle, CPU), RecycleDrafter(), tree=StageShape("tree", budget=8, depth=3, dynamic=True),
                        names=("recycle", "layerskip-26"))
    engine = SpeculativeEngine(target.model, CPU, eos, HierarchyDrafter("layerskip-26", stage, eos), gamma=3,
                               names=("layerskip-26", "target"))
    plain = SpeculativeEngine(target.model, CPU, eos)
    prompt = stratified(spec_bench_split("evaluation"), 13)[8]  # translation: something to recycle
    prompt_ids = encode_prompt(target.tokenizer, prompt.text)
    reference = plain.generate(prompt_ids, NEW_TOKENS, SamplingConfig()).token_ids
    result = engine.generate(prompt_ids, NEW_TOKENS, SamplingConfig())
    assert result.token_ids == reference
    below, top = result.stages
    assert top.verify_forwards == result.target_forwards < NEW_TOKENS  # the middle's drafts were accepted
    assert below.verify_forwards > 0 and below.committed >= top.committed - top.verify_forwards
