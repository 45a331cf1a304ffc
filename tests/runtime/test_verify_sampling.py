"""Sampling verification is lossless: committed tokens are distributed as direct target samples.

The target and the drafter are Markov chains over a tiny vocabulary (row = distribution of
the next token given the last one), so the exact distribution of the first two committed
tokens is known: P[start, a] * P[a, b]. Each trial drafts a fresh tree (sampled children
without replacement from the draft row, deterministic children = the draft's top tokens, or
both), verifies it, and drafts again from the new last token until two tokens are committed.
Pearson's chi-square compares the counts with the exact distribution; the same test run on
deliberately broken verifiers must reject them.
"""

from collections import Counter

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from specplan.runtime import verify
from specplan.runtime.sampling import target_probabilities
from specplan.runtime.tree import DraftTree
from specplan.runtime.verify import VerifyResult, verify_sampling

VOCAB = 6
START = 0
TRIALS = 4000
SAMPLED, DETERMINISTIC = "s", "d"

# Children kinds per depth: the root's children, then each depth-1 node's children.
SHAPES = {
    "sampled": [[SAMPLED] * 3, [SAMPLED] * 2],
    "deterministic": [[DETERMINISTIC] * 3, [DETERMINISTIC] * 2],
    "mixed": [[SAMPLED, DETERMINISTIC, SAMPLED], [DETERMINISTIC, SAMPLED]],
    "wide": [[SAMPLED] * (VOCAB - 1)],
}


def markov_chains(draft_width: int = VOCAB) -> tuple[torch.Tensor, torch.Tensor]:
    """Target rows P [VOCAB, VOCAB] (temperature 0.8, top-p 0.9: some exact zeros) and draft rows Q."""
    generator = torch.Generator().manual_seed(1234)
    target = target_probabilities(2.0 * torch.randn(VOCAB, VOCAB, generator=generator), temperature=0.8, top_p=0.9)
    draft = torch.softmax(1.5 * torch.randn(VOCAB, draft_width, generator=generator), dim=-1)
    return target.double(), draft.double()


def draft_tree(root: int, shape, draft: torch.Tensor, generator: torch.Generator) -> DraftTree:
    """Grow a tree from ``root`` level by level; sampled children are drawn without replacement."""
    parents, tokens, sampled = [-1], [root], [False]
    frontier = [0]
    for kinds in shape:
        next_frontier = []
        for node in frontier:
            row = draft[min(tokens[node], draft.shape[0] - 1)]
            count = kinds.count(SAMPLED)
            draws = iter(torch.multinomial(row, count, replacement=False, generator=generator).tolist() if count else [])
            top = iter(row.argsort(descending=True).tolist())
            for kind in kinds:
                parents.append(node)
                tokens.append(next(draws) if kind == SAMPLED else next(top))
                sampled.append(kind == SAMPLED)
                next_frontier.append(len(tokens) - 1)
        frontier = next_frontier
    token_tensor = torch.tensor(tokens)
    return DraftTree(tuple(parents), token_tensor, draft[token_tensor.clamp(max=draft.shape[0] - 1)], tuple(sampled))


def target_rows(tree: DraftTree, target: torch.Tensor) -> torch.Tensor:
    """Target distribution after every node [num_nodes, VOCAB] (nodes outside the target vocabulary get any row)."""
    return target[tree.tokens.clamp(max=VOCAB - 1)].float()


def run_trials(shape, target, draft, seed: int, trials: int = TRIALS) -> Counter:
    """Counts of the first two committed tokens over ``trials`` independent runs."""
    generator = torch.Generator().manual_seed(seed)
    counts: Counter = Counter()
    for _ in range(trials):
        committed: list[int] = []
        while len(committed) < 2:
            tree = draft_tree(committed[-1] if committed else START, shape, draft, generator)
            committed += verify_sampling(tree, target_rows(tree, target), generator).committed_tokens(tree)
        counts[tuple(committed[:2])] += 1
    return counts


def chi_square_pvalues(counts: Counter, target: torch.Tensor) -> tuple[float, float]:
    """p-values for the first token's marginal and for the joint of the first two tokens."""
    joint_expected = (target[START][:, None] * target).numpy()  # [a, b] = P[start, a] * P[a, b]
    observed = np.zeros((VOCAB, VOCAB))
    for (first, second), count in counts.items():
        observed[first, second] += count
    total = observed.sum()
    impossible = joint_expected <= 0
    assert observed[impossible].sum() == 0, "a token the target cannot produce was committed"
    possible_first = ~impossible.all(1)
    marginal = chisquare(observed.sum(1)[possible_first], _scaled(joint_expected.sum(1)[possible_first], total))
    joint = chisquare(observed[~impossible], _scaled(joint_expected[~impossible], total))
    return float(marginal.pvalue), float(joint.pvalue)


def _scaled(probabilities: np.ndarray, total: float) -> np.ndarray:
    return total * probabilities / probabilities.sum()


@pytest.mark.parametrize("name", ["sampled", "deterministic", "mixed", "wide"])
def test_committed_tokens_match_the_target(name):
    target, draft = markov_chains()
    assert not torch.allclose(target, draft)  # q != p, so rejections and residuals happen
    marginal, joint = chi_square_pvalues(run_trials(SHAPES[name], target, draft, seed=7), target)
    assert marginal > 1e-3 and joint > 1e-3, (marginal, joint)


def test_draft_vocabulary_wider_than_the_target():
    target, draft = markov_chains(draft_width=VOCAB + 2)
    marginal, joint = chi_square_pvalues(run_trials(SHAPES["sampled"], target, draft, seed=8), target)
    assert marginal > 1e-3 and joint > 1e-3, (marginal, joint)


def skip_residual(monkeypatch):
    monkeypatch.setattr(verify, "_residual", lambda p, q: p)
    monkeypatch.setattr(verify, "_residual_point", lambda p, token: p)


def keep_drawn_in_q(monkeypatch):
    monkeypatch.setattr(verify, "_remove_drawn", lambda q, token: q)


@pytest.mark.parametrize(
    "breakage, name",
    [(skip_residual, "sampled"), (skip_residual, "deterministic"), (skip_residual, "mixed"), (keep_drawn_in_q, "wide")],
)
def test_broken_verifier_fails_the_same_test(monkeypatch, breakage, name):
    breakage(monkeypatch)
    target, draft = markov_chains()
    marginal, joint = chi_square_pvalues(run_trials(SHAPES[name], target, draft, seed=7), target)
    assert min(marginal, joint) < 1e-6, (marginal, joint)


def test_seeded_runs_are_reproducible():
    target, draft = markov_chains()
    first = run_trials(SHAPES["mixed"], target, draft, seed=3, trials=200)
    assert run_trials(SHAPES["mixed"], target, draft, seed=3, trials=200) == first
    assert run_trials(SHAPES["mixed"], target, draft, seed=4, trials=200) != first


def test_literal_certain_outcomes():
    generator = torch.Generator().manual_seed(0)
    tree = DraftTree((-1, 0, 0, 1), torch.tensor([0, 1, 2, 3]))
    # The target puts all mass on token 2 at the root and on token 4 after node 2: deterministic child 1 is
    # rejected (p = 0), child 2 accepted (p = 1), and the bonus after leaf node 2 is 4.
    probs = torch.zeros(4, 5)
    probs[0, 2] = 1.0
    probs[2, 4] = 1.0
    probs[1, 0] = probs[3, 0] = 1.0
    assert verify_sampling(tree, probs, generator) == VerifyResult((2,), 4)
    # A root-only tree samples the next token from the target row.
    assert verify_sampling(DraftTree((-1,), torch.tensor([0])), probs[:1], generator) == VerifyResult((), 2)


def test_row_count_must_match():
    tree = DraftTree((-1, 0), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="rows"):
        verify_sampling(tree, torch.full((3, 4), 0.25), torch.Generator())


def slow_nucleus(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Reference for one row: add tokens in order of probability until their mass reaches top_p."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    kept, mass = [], 0.0
    for token in probs.argsort(descending=True).tolist():
        kept.append(token)
        mass += probs[token].item()
        if mass >= top_p:
            break
    filtered = torch.zeros_like(probs)
    filtered[kept] = probs[kept]
    return filtered / filtered.sum()


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9), (1.3, 0.5), (0.5, 0.01)])
def test_target_probabilities_match_slow_nucleus(temperature, top_p):
    logits = torch.randn(5, 50, generator=torch.Generator().manual_seed(5))
    probs = target_probabilities(logits, temperature, top_p)
    assert probs.dtype == torch.float32 and probs.shape == (5, 50)
    for row in range(5):
        torch.testing.assert_close(probs[row].double(), slow_nucleus(logits[row], temperature, top_p), atol=1e-6, rtol=1e-5)
    if top_p < 0.05:
        assert torch.equal((probs > 0).sum(-1), torch.ones(5, dtype=torch.long))  # at least one token survives


def test_temperature_zero_is_one_hot_on_the_first_maximum():
    probs = target_probabilities(torch.tensor([[1.0, 3.0, 3.0, 0.0], [5.0, 0.0, 0.0, 0.0]]), 0.0, top_p=0.5)
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]


@pytest.mark.parametrize("temperature, top_p", [(-0.1, 1.0), (1.0, 0.0), (1.0, 1.5)])
def test_bad_sampling_settings_raise(temperature, top_p):
    with pytest.raises(ValueError, match="temperature|top_p"):
        target_probabilities(torch.zeros(1, 3), temperature, top_p)
