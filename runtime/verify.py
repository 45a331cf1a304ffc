"""Lossless verification of a draft tree: greedy, and multi-candidate rejection sampling.

Greedy: a node is accepted iff its token is the verifier's argmax after its parent; commit
the deepest accepted path plus the verifier's argmax after it (the bonus token).

Sampling (SpecInfer, arXiv 2305.09781, with the without-replacement correction of Sequoia,
arXiv 2402.12374, and Recursive Speculative Decoding, arXiv 2402.14160). At the current node
let ``p`` be the target distribution after it and ``q`` the draft distribution its sampled
children were drawn from, without replacement, in child order. Visit the children in order:

- sampled child ``x``: accept with probability ``min(1, p(x) / q(x))``; on rejection
  ``p <- normalise(max(p - q, 0))`` and ``q <- normalise(q with x removed)``;
- deterministic child ``x`` (top-k, retrieved, grafted): its draft distribution is the
  point mass on ``x``, so accept with probability ``p(x)``; on rejection
  ``p <- normalise(max(p - onehot(x), 0))`` = ``normalise(p with x zeroed)``; ``q`` stays.

If a child is accepted, descend into it with the target's row there; if all are rejected,
or the node is a leaf, the next token is sampled from the current (residual) ``p``.

Why it is lossless: given the earlier children, child i is distributed as ``q_i`` (the
sampled rows without replacement, or a point mass) whatever the earlier coin flips were, so
P(output = y) = min(p_i, q_i)(y) + (sum_x max(q_i - p_i, 0)(x)) * residual_i(y) = p_i(y),
because the residual does not depend on which x was rejected. By induction over the
children the committed token is distributed as p; by induction over depth, so is the path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specplan.runtime.tree import DraftTree

_TINY = 1e-12  # a residual with less mass than this is numerically empty


@dataclass(frozen=True)
class VerifyResult:
    """What one verification commits.

    The committed tokens are the accepted nodes' tokens then ``next_token``, so the accepted
    length (bonus included, docs/planner-math.md) is ``len(accepted_nodes) + 1``. The cache rows
    to keep from the tree forward are ``(0, *accepted_nodes)``.
    """

    accepted_nodes: tuple[int, ...]  # accepted non-root nodes, root-to-leaf order (may be empty)
    next_token: int  # the verifier's bonus / correction token after the last accepted node

    @property
    def accepted_length(self) -> int:
        """Tokens committed, bonus included."""
        return len(self.accepted_nodes) + 1

    @property
    def kept_nodes(self) -> tuple[int, ...]:
        """Tree nodes whose cache rows stay: the root and the accepted path."""
        return (0, *self.accepted_nodes)

    def committed_tokens(self, tree: DraftTree) -> list[int]:
        """Token ids committed by this verification, in order."""
        return [tree.token_list[node] for node in self.accepted_nodes] + [self.next_token]


def verify_greedy(tree: DraftTree, target_logits: torch.Tensor) -> VerifyResult:
    """Greedy tree verification.

    Parameters
    ----------
    tree : the draft tree.
    target_logits : [num_nodes, vocab] verifier logits; row i follows node i.

    Notes
    -----
    One pass in node order (parents come first): node i is accepted iff its parent is and
    ``tokens[i] == argmax(target_logits[parent])``. The deepest accepted node wins (the
    first in node order on a tie, which only duplicate siblings can cause). O(n).

    Example
    -------
    >>> tree = DraftTree((-1, 0, 0, 1), torch.tensor([9, 3, 4, 5]))
    >>> logits = torch.nn.functional.one_hot(torch.tensor([4, 0, 5, 1]), 8).float()
    >>> verify_greedy(tree, logits)
    VerifyResult(accepted_nodes=(2,), next_token=5)
    """
    if target_logits.shape[0] != tree.num_nodes:
        raise ValueError(f"target_logits has {target_logits.shape[0]} rows for a tree of {tree.num_nodes} nodes")
    return accept_greedy_tree(tree, best_tokens(target_logits))


def accept_greedy_tree(tree: DraftTree, best: Sequence[int]) -> VerifyResult:
    """:func:`verify_greedy` given only ``best[i]``, the argmax of the verifier's row after node i:
    what a backend that reads the argmax in place returns (``Session.extend_best_tokens``).

    >>> accept_greedy_tree(DraftTree((-1, 0, 0, 1), torch.tensor([9, 3, 4, 5])), [4, 0, 5, 1])
    VerifyResult(accepted_nodes=(2,), next_token=5)
    """
    if len(best) != tree.num_nodes:
        raise ValueError(f"{len(best)} best tokens for a tree of {tree.num_nodes} nodes")
    tokens = tree.token_list
    accepted = [True] + [False] * (tree.num_nodes - 1)
    deepest = 0
    for node in range(1, tree.num_nodes):
        parent = tree.parents[node]
        if accepted[parent] and tokens[node] == best[parent]:
            accepted[node] = True
            if tree.depth[node] > tree.depth[deepest]:
                deepest = node
    return VerifyResult(tree.path_to(deepest)[1:], int(best[deepest]))


def verify_greedy_chain(tokens: Sequence[int], target_logits: torch.Tensor) -> VerifyResult:
    """:func:`verify_greedy` of the chain ``tokens`` (``tokens[0]`` the root, each token the child
    of the one before) without building its tree: the draft is accepted up to its first token
    that is not the verifier's argmax after the token before it. Every greedy sequence round
    (plain decoding included) verifies through this, right after the target's forward, when
    Python runs cold: building the chain's tree there cost more than the verify itself.

    >>> logits = torch.nn.functional.one_hot(torch.tensor([4, 5, 6, 7]), 8).float()
    >>> verify_greedy_chain([9, 4, 5, 3], logits), verify_greedy_chain([9], logits[:1])
    (VerifyResult(accepted_nodes=(1, 2), next_token=6), VerifyResult(accepted_nodes=(), next_token=4))
    """
    if target_logits.shape[0] != len(tokens):
        raise ValueError(f"target_logits has {target_logits.shape[0]} rows for a chain of {len(tokens)} tokens")
    return accept_greedy_chain(tokens, best_tokens(target_logits))


def accept_greedy_chain(tokens: Sequence[int], best: Sequence[int]) -> VerifyResult:
    """:func:`verify_greedy_chain` given only ``best[i]``, the argmax of the verifier's row after
    ``tokens[i]`` (as :func:`accept_greedy_tree`).

    >>> accept_greedy_chain([9, 4, 5, 3], [4, 5, 6, 7])
    VerifyResult(accepted_nodes=(1, 2), next_token=6)
    """
    if len(best) != len(tokens):
        raise ValueError(f"{len(best)} best tokens for a chain of {len(tokens)} tokens")
    accepted = 0
    while accepted + 1 < len(tokens) and tokens[accepted + 1] == best[accepted]:
        accepted += 1
    return VerifyResult(tuple(range(1, accepted + 1)), int(best[accepted]))


def best_tokens(target_logits: torch.Tensor) -> list[int]:
    """The argmax of every row of ``target_logits`` [rows, vocab], the first maximum on ties (as
    ``torch.argmax``). A CPU float32 row goes through numpy, whose argmax over a vocabulary-wide
    row costs a small fraction of torch's; other devices and dtypes through torch.

    >>> best_tokens(torch.tensor([[0.0, 2.0, 2.0], [3.0, 1.0, 0.0]]))
    [1, 0]
    """
    if target_logits.device.type == "cpu" and target_logits.dtype == torch.float32:
        return target_logits.detach().numpy().argmax(axis=-1).tolist()
    return target_logits.argmax(dim=-1).tolist()


def verify_sampling(tree: DraftTree, target_probs: torch.Tensor, generator: torch.Generator) -> VerifyResult:
    """Lossless multi-candidate rejection sampling over the tree (see the module docstring).

    Parameters
    ----------
    tree : the draft tree; ``tree.draft_probs`` rows are needed where a child is sampled.
    target_probs : [num_nodes, vocab] target distributions (from ``target_probabilities``);
        row i follows node i.
    generator : all randomness comes from it, on its device; the same seed gives the same
        result. Rows are moved to that device and computed in float64.

    Notes
    -----
    Each visited child costs one O(vocab) update at most; only rows on the accepted path are
    read. At temperature 0 (one-hot ``p``) this accepts exactly what :func:`verify_greedy`
    accepts on trees whose siblings carry distinct tokens.
    """
    if target_probs.shape[0] != tree.num_nodes:
        raise ValueError(f"target_probs has {target_probs.shape[0]} rows for a tree of {tree.num_nodes} nodes")
    device = generator.device
    tokens = tree.token_list
    accepted: list[int] = []
    node = 0
    while True:
        children = tree.children(node)
        p = _normalise(target_probs[node].to(device, torch.float64))
        if children:
            q = None
            if any(tree.is_sampled(child) for child in children):
                p, q = _pad_to_same_width(p, _normalise(tree.draft_probs[node].to(device, torch.float64)))
            chosen, p = _visit_children(tree, children, tokens, p, q, generator)
            if chosen is not None:
                accepted.append(chosen)
                node = chosen
                continue
        next_token = torch.multinomial(p, 1, generator=generator).item()
        return VerifyResult(tuple(accepted), int(next_token))


def _visit_children(tree, children, tokens, p, q, generator):
    """Try ``children`` of one node in order; return (accepted child or None, residual p)."""
    for child in children:
        token = tokens[child]
        target = p[token].item() if token < p.numel() else 0.0
        if tree.is_sampled(child):
            draft = q[token].item() if token < q.numel() else 0.0
            ratio = 1.0 if draft <= 0.0 else target / draft
        else:
            ratio = target
        if ratio >= 1.0 or (ratio > 0.0 and _uniform(generator) < ratio):
            return child, p
        if tree.is_sampled(child):
            p = _residual(p, q)
            q = _remove_drawn(q, token)
        else:
            p = _residual_point(p, token)
    return None, p


def _normalise(row: torch.Tensor) -> torch.Tensor:
    """``row / row.sum()``: rows computed in lower precision may miss 1 by a rounding error."""
    return row / row.sum()


def _uniform(generator: torch.Generator) -> float:
    return torch.rand((), generator=generator, device=generator.device, dtype=torch.float64).item()


def _pad_to_same_width(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-pad the narrower of p and q (drafter and target vocabularies may be padded differently)."""
    width = max(p.numel(), q.numel())
    return torch.nn.functional.pad(p, (0, width - p.numel())), torch.nn.functional.pad(q, (0, width - q.numel()))


def _residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``normalise(max(p - q, 0))``; keeps ``p`` if that is numerically empty."""
    residual = (p - q).clamp_(min=0.0)
    mass = residual.sum()
    return residual / mass if mass.item() > _TINY else p


def _residual_point(p: torch.Tensor, token: int) -> torch.Tensor:
    """``normalise(max(p - onehot(token), 0))``, i.e. ``p`` with ``token`` zeroed."""
    if token >= p.numel():
        return p
    residual = p.clone()
    residual[token] = 0.0
    mass = residual.sum()
    return residual / mass if mass.item() > _TINY else p


def _remove_drawn(q: torch.Tensor, token: int) -> torch.Tensor:
    """The draft row for the next sibling drawn without replacement: ``q`` without ``token``."""
    if token >= q.numel():
        return q
    rest = q.clone()
    rest[token] = 0.0
    mass = rest.sum()
    return rest / mass if mass.item() > _TINY else rest
