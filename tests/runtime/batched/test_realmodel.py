"""The batched runtime on the real default model (SmolLM2-135M-Instruct), float32: 8 Spec-Bench
prompts of different lengths decoded together, every sequence token-identical to the prompt
decoded alone by plain greedy decoding, for a sequence stage and
for a tree stage."""

from __future__ import annotations

import pytest
import torch

from specplan.core.plan import StageShape
from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.prompts import spec_bench_split, stratified
from specplan.models.chat import encode_prompt
from specplan.models.load import load_model
from specplan.runtime.batched.engine import BatchedEngine
from specplan.runtime.batched.drafters import BatchedModelDrafter, PerSequenceDrafters
from specplan.runtime.batched.tree import BatchedTreeEngine, PerSequenceTreeDrafters
from specplan.runtime.build import build_drafter, eos_ids
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.runtime.engine import SpeculativeEngine

CPU = torch.device("cpu")
NEW_TOKENS = 48


def eight_prompts_alone():
    """The float32 default model, 8 Spec-Bench prompts of different lengths, and each one's plain greedy output."""
    loaded = load_model("default", "float32")
    prompts = [encode_prompt(loaded.tokenizer, prompt.text)
               for prompt in stratified(spec_bench_split("evaluation"), 8)]
    assert len({len(ids) for ids in prompts}) > 1  # different lengths: padding is exercised
    plain = SpeculativeEngine(loaded.model, CPU, eos_ids(loaded))
    return loaded, prompts, [list(plain.generate(ids, NEW_TOKENS, SamplingConfig()).token_ids) for ids in prompts]


@pytest.mark.slow
@pytest.mark.parametrize("drafter", ["ngram:3"])  # a batched layerskip:20 drafter also runs (minutes on 2 CPU cores)
def test_eight_prompts_batched_are_identical_to_each_alone(default_model_dir, drafter):
    loaded, prompts, expected = eight_prompts_alone()
    stop = eos_ids(loaded)
    spec = parse_drafter_spec(drafter)
    if spec.kind == "ngram":
        batched_drafter, gamma = PerSequenceDrafters(lambda: NgramDrafter(int(spec.argument))), 4
    else:
        network = build_drafter(spec, loaded, CPU).model
        batched_drafter, gamma = BatchedModelDrafter(spec.id, network, CPU), 3
    engine = BatchedEngine(loaded.model, CPU, stop, batched_drafter, gamma, pad_id=min(stop))
    result = engine.generate(prompts, NEW_TOKENS)
    assert [list(sequence.token_ids) for sequence in result.sequences] == expected
    assert result.rounds < NEW_TOKENS  # drafts were accepted somewhere


@pytest.mark.slow
def test_eight_prompts_with_recycling_trees_batched_are_identical_to_each_alone(default_model_dir):
    """A tree stage over the batch: each sequence's recycling table grows its own static tree."""
    loaded, prompts, expected = eight_prompts_alone()
    stop = eos_ids(loaded)
    shape = StageShape("tree", parents=(-1, 0, 0, 1, 1, 2, 3))
    engine = BatchedTreeEngine(loaded.model, CPU, stop, PerSequenceTreeDrafters(RecycleDrafter, shape), shape.max_depth,
                               pad_id=min(stop))
    result = engine.generate(prompts, NEW_TOKENS)
    assert [list(sequence.token_ids) for sequence in result.sequences] == expected
    assert result.rounds < NEW_TOKENS  # drafts were accepted somewhere
