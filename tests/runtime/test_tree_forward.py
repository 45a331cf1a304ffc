"""A tree's mask and positions (``DraftTree.attention_mask`` / ``position_ids``) in one forward
over a KV cache, against sequential recomputation (tiny random Llama, float32)."""

import pytest
import torch
from tests.runtime.tiny_models import TINY_VOCAB, tiny_llama

from specplan.runtime.kv import cache_length, keep_nodes, new_cache
from specplan.runtime.tree import DraftTree
from specplan.runtime.verify import verify_greedy

IMPLEMENTATIONS = ["eager", "sdpa"]
#          0
#       /  |  \
#      1   2   3
#     / \   \
#    4   5   6
#    |       |
#    7       8
PARENTS = (-1, 0, 0, 0, 1, 1, 2, 4, 6)
PREFIX = 6


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def model(request):
    return tiny_llama(request.param)


def setup(model, seed=0):
    generator = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, TINY_VOCAB, (PREFIX,), generator=generator)
    tokens = torch.randint(0, TINY_VOCAB, (len(PARENTS),), generator=generator)
    tree = DraftTree(PARENTS, tokens)
    cache = new_cache(model)
    with torch.no_grad():
        model(input_ids=prefix.unsqueeze(0), past_key_values=cache, use_cache=True)
    return prefix, tree, cache


@torch.no_grad()
def tree_forward(model, cache, tree: DraftTree, past_length: int) -> torch.Tensor:
    """Logits [num_nodes, vocab] of the tree fed on top of ``past_length`` cached positions."""
    assert cache_length(cache) == past_length
    output = model(input_ids=tree.tokens.unsqueeze(0), attention_mask=tree.attention_mask(past_length, model.dtype, "cpu"),
                   position_ids=tree.position_ids(past_length, "cpu"), past_key_values=cache, use_cache=True)
    return output.logits[0]


def full_logits(model, ids) -> torch.Tensor:
    """Logits [len(ids), vocab] of a plain causal forward without any cache."""
    with torch.no_grad():
        return model(input_ids=torch.as_tensor(ids).unsqueeze(0)).logits[0]


def test_tree_logits_equal_sequential_recompute_of_each_branch(model):
    prefix, tree, cache = setup(model)
    logits = tree_forward(model, cache, tree, PREFIX)
    assert logits.shape == (tree.num_nodes, TINY_VOCAB)
    assert cache_length(cache) == PREFIX + tree.num_nodes
    for path in tree.paths():
        ids = torch.cat([prefix, tree.tokens[list(path)]])
        reference = full_logits(model, ids)[PREFIX:]
        torch.testing.assert_close(logits[list(path)], reference, rtol=1e-5, atol=1e-5)


def test_chain_forward_equals_plain_forward(model):
    prefix, _, cache = setup(model)
    chain = DraftTree.chain(torch.tensor([3, 1, 4, 1, 5]))
    logits = tree_forward(model, cache, chain, PREFIX)
    torch.testing.assert_close(logits, full_logits(model, torch.cat([prefix, chain.tokens]))[PREFIX:], rtol=1e-5, atol=1e-5)


def test_broken_mask_would_be_caught(model):
    """The recompute test can fail: a plain causal mask over the tree differs from every branch."""
    prefix, tree, cache = setup(model)
    with torch.no_grad():
        causal = model(input_ids=tree.tokens.unsqueeze(0), past_key_values=cache, use_cache=True).logits[0]
    ids = torch.cat([prefix, tree.tokens[list(tree.path_to(8))]])
    assert not torch.allclose(causal[8], full_logits(model, ids)[-1], atol=1e-3)


@pytest.mark.parametrize("kept", [(0, 2, 6, 8), (0, 1, 4, 7), (0, 3), (0,)])
def test_compaction_then_decode_equals_full_recompute(model, kept):
    prefix, tree, cache = setup(model, seed=1)
    tree_forward(model, cache, tree, PREFIX)
    keep_nodes(cache, PREFIX, kept)
    assert cache_length(cache) == PREFIX + len(kept)
    next_token = 17
    with torch.no_grad():
        step = model(input_ids=torch.tensor([[next_token]]), past_key_values=cache, use_cache=True).logits[0, -1]
    ids = torch.cat([prefix, tree.tokens[list(kept)], torch.tensor([next_token])])
    torch.testing.assert_close(step, full_logits(model, ids)[-1], rtol=1e-5, atol=1e-5)


def test_second_tree_after_compaction_equals_recompute(model):
    """Two speculative rounds: tree, greedy verify, compact, then another tree on top."""
    prefix, tree, cache = setup(model, seed=2)
    logits = tree_forward(model, cache, tree, PREFIX)
    result = verify_greedy(tree, logits)
    keep_nodes(cache, PREFIX, result.kept_nodes)
    past = PREFIX + len(result.kept_nodes)
    committed = torch.cat([prefix, tree.tokens[list(result.kept_nodes)]])
    second = DraftTree((-1, 0, 0, 1), torch.tensor([result.next_token, 5, 6, 7]))
    logits = tree_forward(model, cache, second, past)
    for path in second.paths():
        reference = full_logits(model, torch.cat([committed, second.tokens[list(path)]]))[past:]
        torch.testing.assert_close(logits[list(path)], reference, rtol=1e-5, atol=1e-5)


def test_greedy_tree_verification_matches_plain_greedy(model):
    """The model's own greedy chain, with a wrong sibling before it at every level, is accepted."""
    generator = torch.Generator().manual_seed(3)
    committed = torch.randint(0, TINY_VOCAB, (PREFIX + 1,), generator=generator).tolist()
    greedy: list[int] = []
    for _ in range(5):
        greedy.append(int(full_logits(model, committed + greedy)[-1].argmax()))
    parents, tokens, previous = [-1], [committed[-1]], 0
    for token in greedy[:4]:
        parents += [previous, previous]
        tokens += [(token + 1) % TINY_VOCAB, token]
        previous = len(tokens) - 1
    tree = DraftTree(tuple(parents), torch.tensor(tokens))
    cache = new_cache(model)
    with torch.no_grad():
        model(input_ids=torch.tensor([committed[:-1]]), past_key_values=cache, use_cache=True)
    result = verify_greedy(tree, tree_forward(model, cache, tree, PREFIX))
    assert result.accepted_nodes == (2, 4, 6, 8)
    assert result.committed_tokens(tree) == greedy
