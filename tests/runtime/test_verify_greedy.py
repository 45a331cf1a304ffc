"""Greedy tree verification on small literal trees, against a slow reference, and vs sampling at T=0."""

import random

import pytest
import torch

from specplan.runtime.sampling import target_probabilities
from specplan.runtime.tree import DraftTree
from specplan.runtime.verify import VerifyResult, verify_greedy, verify_sampling

VOCAB = 10


def logits_with_argmax(best: list[int]) -> torch.Tensor:
    """Logits [len(best), VOCAB] whose row i has its maximum at best[i]."""
    logits = torch.randn(len(best), VOCAB, generator=torch.Generator().manual_seed(len(best)))
    logits[torch.arange(len(best)), torch.tensor(best)] = 10.0
    return logits


#        0:9
#      /     \
#    1:3     2:4
#    / \       \
#  3:5 4:6     5:7
TREE = DraftTree((-1, 0, 0, 1, 1, 2), torch.tensor([9, 3, 4, 5, 6, 7]))


@pytest.mark.parametrize(
    "best, accepted, next_token",
    [
        ([3, 6, 0, 0, 0, 0], (1, 4), 0),  # second child of node 1, bonus after node 4
        ([3, 6, 0, 0, 8, 0], (1, 4), 8),
        ([4, 0, 7, 0, 0, 2], (2, 5), 2),  # the other branch, to its leaf
        ([4, 0, 1, 0, 0, 0], (2,), 1),  # node 5 (token 7) rejected after node 2
        ([8, 6, 7, 0, 0, 0], (), 8),  # nothing accepted: the correction token only
        ([3, 2, 7, 0, 0, 0], (1,), 2),  # node 1 accepted, neither grandchild
    ],
)
def test_literal_cases(best, accepted, next_token):
    result = verify_greedy(TREE, logits_with_argmax(best))
    assert result == VerifyResult(accepted, next_token)
    assert result.accepted_length == len(accepted) + 1
    assert result.kept_nodes == (0, *accepted)


def test_root_only_tree_is_a_decode_step():
    tree = DraftTree((-1,), torch.tensor([4]))
    assert verify_greedy(tree, logits_with_argmax([6])) == VerifyResult((), 6)


def test_chain_accepts_longest_matching_prefix():
    chain = DraftTree.chain(torch.tensor([1, 2, 3, 4, 5]))
    assert verify_greedy(chain, logits_with_argmax([2, 3, 9, 5, 6])) == VerifyResult((1, 2), 9)
    assert verify_greedy(chain, logits_with_argmax([2, 3, 4, 5, 6])) == VerifyResult((1, 2, 3, 4), 6)
    assert chain.token_list[1:3] == (2, 3)


def test_duplicate_siblings_take_the_deepest_path():
    #   0 -> 1:5 (leaf), 2:5 -> 3:6
    tree = DraftTree((-1, 0, 0, 2), torch.tensor([0, 5, 5, 6]))
    assert verify_greedy(tree, logits_with_argmax([5, 6, 6, 1])) == VerifyResult((2, 3), 1)


def test_row_count_must_match():
    with pytest.raises(ValueError, match="rows"):
        verify_greedy(TREE, torch.zeros(3, VOCAB))


def slow_greedy(tree: DraftTree, logits: torch.Tensor) -> VerifyResult:
    """Reference: walk every root-to-leaf path, keep the longest accepted prefix."""
    best = logits.argmax(dim=-1).tolist()
    tokens = tree.tokens.tolist()
    winner: tuple[int, ...] = ()
    for path in tree.paths():
        prefix: list[int] = []
        for parent, node in zip(path, path[1:]):
            if tokens[node] != best[parent]:
                break
            prefix.append(node)
        if len(prefix) > len(winner):
            winner = tuple(prefix)
    return VerifyResult(winner, best[winner[-1] if winner else 0])


def random_trie(rng: random.Random, size: int, vocab: int) -> DraftTree:
    """A random tree whose siblings carry distinct tokens, built from a small alphabet so matches happen."""
    parents, tokens, used = [-1], [rng.randrange(vocab)], [set()]
    while len(parents) < size:
        parent = rng.randrange(len(parents))
        free = [token for token in range(vocab) if token not in used[parent]]
        if not free:
            continue
        token = rng.choice(free)
        used[parent].add(token)
        parents.append(parent)
        tokens.append(token)
        used.append(set())
    return DraftTree(tuple(parents), torch.tensor(tokens))


def test_matches_slow_reference_on_random_tries():
    rng = random.Random(0)
    generator = torch.Generator().manual_seed(0)
    depths = []
    for _ in range(300):
        tree = random_trie(rng, rng.randrange(1, 16), vocab=3)
        logits = torch.randn(tree.num_nodes, 3, generator=generator)
        result = verify_greedy(tree, logits)
        assert result == slow_greedy(tree, logits)
        depths.append(len(result.accepted_nodes))
    assert max(depths) >= 3  # the cases are not all trivial


def test_sampling_at_temperature_zero_agrees_with_greedy():
    rng = random.Random(1)
    generator = torch.Generator().manual_seed(1)
    for trial in range(200):
        tree = random_trie(rng, rng.randrange(1, 16), vocab=4)
        sampled = tuple([False] + [rng.random() < 0.5 for _ in range(tree.num_nodes - 1)])
        draft = torch.softmax(torch.randn(tree.num_nodes, 4, generator=generator), dim=-1)
        tree = DraftTree(tree.parents, tree.tokens, draft, sampled)
        logits = torch.randn(tree.num_nodes, 4, generator=generator)
        probs = target_probabilities(logits, temperature=0.0)
        assert verify_sampling(tree, probs, generator) == verify_greedy(tree, logits), trial


def test_the_chain_verify_is_the_tree_verify_of_the_chain():
    """verify_greedy_chain (a sequence round's greedy verify, no tree built) commits what
    verify_greedy does on the same chain as a tree, on random drafts that match for a while."""
    from specplan.runtime.verify import best_tokens, verify_greedy_chain

    rng = random.Random(3)
    for _ in range(300):
        length = rng.randint(1, 8)
        best = [rng.randrange(VOCAB) for _ in range(length)]
        matched = rng.randint(0, length - 1)
        draft = best[:matched] + [rng.randrange(VOCAB) for _ in range(length - 1 - matched)]
        tokens = [rng.randrange(VOCAB), *draft]
        logits = logits_with_argmax(best)
        assert verify_greedy_chain(tokens, logits) == verify_greedy(DraftTree.chain(torch.tensor(tokens)), logits)
    with pytest.raises(ValueError, match="rows for a chain of 3 tokens"):
        verify_greedy_chain([1, 2, 3], logits_with_argmax([1, 2]))
    ties = torch.tensor([[1.0, 5.0, 5.0], [float("nan"), 0.0, 9.0]])  # first maximum; NaN counts as the maximum
    assert best_tokens(ties) == ties.argmax(dim=-1).tolist() == best_tokens(ties.double()) == [1, 0]
