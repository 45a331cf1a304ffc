"""DraftTree: validation, derived structure, masks, positions."""

import random

import pytest
import torch

from specplan.core.errors import TreeError
from specplan.runtime.tree import DraftTree

#        0
#      /   \
#     1     2
#    / \     \
#   3   4     5
#   |
#   6
PARENTS = (-1, 0, 0, 1, 1, 2, 3)


def make(parents=PARENTS):
    return DraftTree(parents, torch.arange(len(parents)) + 10)


def test_structure():
    tree = make()
    assert tree.num_nodes == 7
    assert tree.depth == (0, 1, 1, 2, 2, 2, 3)
    assert [tree.children(node) for node in range(7)] == [(1, 2), (3, 4), (5,), (6,), (), (), ()]
    assert tree.ranks == (0, 0, 1, 0, 1, 0, 0)
    assert tree.paths() == ((0, 1, 4), (0, 2, 5), (0, 1, 3, 6))  # leaves in node order: 4, 5, 6
    assert tree.path_to(6) == (0, 1, 3, 6)
    assert tree.token_list == (10, 11, 12, 13, 14, 15, 16)


def test_ancestor_mask_literal():
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0, 0],
            [1, 0, 1, 0, 0, 0, 0],
            [1, 1, 0, 1, 0, 0, 0],
            [1, 1, 0, 0, 1, 0, 0],
            [1, 0, 1, 0, 0, 1, 0],
            [1, 1, 0, 1, 0, 0, 1],
        ],
        dtype=torch.bool,
    )
    mask = make().ancestor_mask()
    assert torch.equal(mask, expected)
    assert (mask.sum(dim=1) - 1).tolist() == list(make().depth)  # EAGLE: position = row sum - 1


def test_attention_mask_and_positions():
    tree = make()
    mask = tree.attention_mask(past_length=3, dtype=torch.float32, device="cpu")
    assert mask.shape == (1, 1, 7, 10) and mask.dtype == torch.float32
    assert torch.all(mask[0, 0, :, :3] == 0)
    blocked = torch.finfo(torch.float32).min
    assert torch.equal(mask[0, 0, :, 3:] == 0, tree.ancestor_mask())
    assert torch.all(mask[0, 0, :, 3:][~tree.ancestor_mask()] == blocked)
    half = tree.attention_mask(0, torch.bfloat16, "cpu")
    assert half.dtype == torch.bfloat16 and half.min() == torch.finfo(torch.bfloat16).min
    assert tree.position_ids(5, "cpu").tolist() == [[5, 6, 6, 7, 7, 7, 8]]


def test_chain():
    tree = DraftTree.chain(torch.tensor([4, 5, 6, 7]))
    assert tree.parents == (-1, 0, 1, 2)
    assert tree.paths() == ((0, 1, 2, 3),)
    assert torch.equal(tree.ancestor_mask(), torch.ones(4, 4, dtype=torch.bool).tril())
    assert DraftTree.chain([3]).num_nodes == 1


@pytest.mark.parametrize(
    "parents, words",
    [
        ((), "empty"),
        ((0, 0), "parent must be -1"),
        ((-1, 1), "cycle"),
        ((-1, 0, 3, 1), "parent after its child"),
        ((-1, 0, -1), "not a node"),
        ((-1, 2, 1), "cycle"),
    ],
)
def test_bad_parent_arrays_raise_one_line(parents, words):
    with pytest.raises(TreeError, match=words) as caught:
        DraftTree(parents, torch.zeros(len(parents), dtype=torch.long))
    assert "\n" not in str(caught.value)


def test_bad_fields_raise():
    with pytest.raises(TreeError, match="tokens"):
        DraftTree((-1, 0), torch.tensor([1, 2, 3]))
    with pytest.raises(TreeError, match="tokens"):
        DraftTree((-1, 0), torch.tensor([1.0, 2.0]))
    with pytest.raises(TreeError, match="draft_probs is None"):
        DraftTree((-1, 0), torch.tensor([1, 2]), sampled=(False, True))
    with pytest.raises(TreeError, match="draft_probs must be"):
        DraftTree((-1, 0), torch.tensor([1, 2]), draft_probs=torch.ones(3, 4))
    with pytest.raises(TreeError, match="one flag per node"):
        DraftTree((-1, 0), torch.tensor([1, 2]), torch.ones(2, 4), sampled=(True,))


def test_fields_are_normalised():
    tree = DraftTree([-1, 0, 0], [7, 8, 9], sampled=[0, 0, 0])
    assert tree.parents == (-1, 0, 0) and tree.sampled == (False, False, False)
    assert tree.tokens.dtype == torch.long


def random_parents(rng: random.Random, size: int) -> tuple[int, ...]:
    return (-1, *(rng.randrange(node) for node in range(1, size)))


def test_ancestor_mask_matches_slow_reference():
    rng = random.Random(1)
    for _ in range(20):
        tree = make(random_parents(rng, rng.randrange(1, 15)))
        slow = torch.zeros(tree.num_nodes, tree.num_nodes, dtype=torch.bool)
        for node in range(tree.num_nodes):
            for ancestor in tree.path_to(node):
                slow[node, ancestor] = True
        assert torch.equal(tree.ancestor_mask(), slow)


def test_a_tree_after_a_chain_masks_and_positions_like_one_longer_tree():
    tree = DraftTree((-1, 0, 0, 1), torch.tensor([5, 6, 7, 8]))
    behind = tree.after_chain([3, 4])
    assert behind.parents == (-1, 0, 1, 2, 2, 3)
    assert behind.token_list == (3, 4, 5, 6, 7, 8)
    assert behind.position_ids(10, "cpu").tolist() == [[10, 11, 12, 13, 13, 14]]
    mask = behind.attention_mask(10, torch.float32, "cpu")[0, 0, :, 10:] == 0
    assert mask[4].tolist() == [True, True, True, False, True, False]  # node 7: chain, root, itself
    assert torch.equal(mask[2:, 2:], tree.attention_mask(0, torch.float32, "cpu")[0, 0] == 0)
