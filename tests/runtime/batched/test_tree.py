"""A tree stage over a batch (runtime/batched/tree.py): every sequence's tree verified in one
forward is token-identical to each prompt decoded alone, whatever the drafter, the shape, the
holes and the stops."""

from __future__ import annotations

import pytest
import torch

from specplan.core.plan import StageShape
from specplan.runtime.batched.cache import BatchedKV
from specplan.runtime.batched.tree import BatchedTreeEngine, PerSequenceTreeDrafters
from specplan.runtime.drafters.cacheback import CacheDrafter
from specplan.runtime.drafters.ngram_tree import NgramTreeDrafter
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.runtime.session import ModelSession
from specplan.runtime.tree import DraftTree
from tests.runtime.batched.test_engine import CPU, NEW_TOKENS, PROMPTS, plain_alone, reference
from tests.runtime.tiny_models import tiny_llama

DRAFTERS = {"ngram": lambda: NgramTreeDrafter(2), "cache": CacheDrafter, "recycle": RecycleDrafter}
SHAPES = {"static": StageShape("tree", parents=(-1, 0, 0, 1, 1, 3)), "best-first": StageShape("tree", budget=6, depth=3, dynamic=True)}


def engine_for(target, name: str, shape: str, compact_holes: float = 1.0, eos=frozenset()) -> BatchedTreeEngine:
    tree_shape = SHAPES[shape]
    return BatchedTreeEngine(target, CPU, set(eos), PerSequenceTreeDrafters(DRAFTERS[name], tree_shape), tree_shape.max_depth,
                             compact_holes=compact_holes)


@pytest.mark.parametrize("attn, name, shape, compact_holes", [
    ("sdpa", "ngram", "static", 1.0), ("eager", "ngram", "static", 0.0), ("sdpa", "cache", "best-first", 0.25),
    ("sdpa", "recycle", "static", 0.0), ("eager", "recycle", "best-first", 1.0), ("sdpa", "ngram", "best-first", 0.0),
])
def test_batched_trees_are_token_identical_to_each_prompt_alone(attn, name, shape, compact_holes):
    target = tiny_llama(attn, seed=0)
    result = engine_for(target, name, shape, compact_holes).generate(PROMPTS, NEW_TOKENS)
    assert [list(sequence.token_ids) for sequence in result.sequences] == reference(attn)
    assert result.new_tokens == NEW_TOKENS * len(PROMPTS)
    assert max(result.verify_widths) > 2  # trees wider than a chain of one draft were verified
    # the drafters found continuations: some rounds committed more than one token per sequence
    assert any(max(sequence.committed_per_forward) > 1 for sequence in result.sequences)


def test_each_sequence_stops_at_its_own_eos_and_budget():
    target = tiny_llama("sdpa", seed=0)
    alone = plain_alone(target, PROMPTS, 7)
    eos = {alone[1][2], alone[3][4]}  # sequences 1 and 3 stop early, at different rounds
    expected = plain_alone(target, PROMPTS, 7, eos)
    result = engine_for(target, "ngram", "static", eos=eos).generate(PROMPTS, 7)
    assert [list(sequence.token_ids) for sequence in result.sequences] == expected
    assert {sequence.stop_reason for sequence in result.sequences} == {"eos", "max_new_tokens"}
    assert all(len(sequence.token_ids) <= 7 for sequence in result.sequences)


def test_a_tree_row_sees_its_sequence_and_its_ancestors_only():
    target = tiny_llama("sdpa", seed=0)
    kv = BatchedKV(target, CPU, compact_holes=1.0)  # holes stay where they are
    kv.forward([[1, 2, 3], [4]])
    kv.keep([3, 1])
    trees = [DraftTree((-1, 0, 0, 1), torch.tensor([3, 5, 6, 7])), DraftTree((-1, 0), torch.tensor([4, 8]))]
    mask = kv.tree_mask(trees, 4)[:, 0] == 0  # [b, width, slots + width] attended
    assert mask.shape == (2, 4, 7)
    assert mask[0, 3].tolist() == [True, True, True, True, True, False, True]  # past, root, node 1, itself
    assert mask[0, 2].tolist() == [True, True, True, True, False, True, False]  # node 2: not its sibling
    assert mask[1, 1].tolist() == [True, False, False, True, True, False, False]  # its one past slot, root, itself
    assert mask[1, 3].tolist() == [True, False, False, False, False, False, True]  # padding: past and itself


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_each_tree_row_gets_the_logits_of_its_tree_forward_alone(attn):
    """Mask and depth positions: sequence i's rows of the batched tree forward equal the rows of
    the same tree verified after the same prompt by the one-sequence session (float32)."""
    target = tiny_llama(attn, seed=0)
    prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[4]]
    trees = [DraftTree((-1, 0, 0, 1, 3), torch.tensor([prompts[0][-1], 5, 6, 7, 8])),
             DraftTree((-1, 0), torch.tensor([prompts[1][-1], 9])),
             DraftTree((-1, 0, 1, 0, 3, 3), torch.tensor([prompts[2][-1], 3, 4, 5, 6, 7]))]
    kv = BatchedKV(target, CPU)
    kv.forward([prompt[:-1] for prompt in prompts])
    logits = kv.forward([tree.token_list for tree in trees], trees)
    for index, (prompt, tree) in enumerate(zip(prompts, trees)):
        session = ModelSession(target, CPU)
        session.extend(prompt[:-1])
        alone = session.extend(tree.token_list, tree=tree)  # [n, vocab]
        torch.testing.assert_close(logits[index, : tree.num_nodes].float(), alone, rtol=1e-4, atol=1e-4)
