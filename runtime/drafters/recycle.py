"""``recycle``: Token Recycling (Luo et al., arXiv 2408.08696).

Every target forward computes a distribution after each token it was fed, and speculative
decoding keeps only one token of it. Token Recycling keeps the top-k of each: an adjacency
table maps a token to its k most probable successors (with their target probabilities) the
last time the target saw it, and is overwritten after every verifier forward (prefill
included) with that forward's logits, accepted or not. Drafting expands the table from the
root breadth-first, level by level; a best-first shape keys a node by the product of the
stored probabilities on its path, a static shape takes the top successors in rank order.
The table is per prompt (``reset`` clears it), so that sampled runs are reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specplan.runtime.drafters.retrieval_tree import RetrievalTreeDrafter
from specplan.runtime.drafters.tree_growth import Children
from specplan.runtime.top_k import top_rows


class SuccessorTable:
    """token -> (its top-k successors, their probabilities), from the latest forward that fed it."""

    def __init__(self, top_k: int = 8):
        self.top_k = top_k
        self.rows: dict[int, tuple[tuple[int, ...], tuple[float, ...]]] = {}

    def update(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        """Overwrite the rows of ``tokens`` [n] from logits [n, vocab] (row i follows token i).

        >>> table = SuccessorTable(top_k=2)
        >>> table.update([7], torch.log(torch.tensor([[0.1, 0.6, 0.3]])))
        >>> [round(p, 3) for p in table.rows[7][1]], table.rows[7][0]
        ([0.6, 0.3], (1, 2))
        """
        if len(tokens) == 0:
            return
        indices, probs = top_rows(logits, self.top_k)  # [n, k] each
        self.update_top(tokens, indices.tolist(), probs.tolist())

    def update_top(self, tokens: Sequence[int], id_rows: Sequence[Sequence[int]],
                   prob_rows: Sequence[Sequence[float]]) -> None:
        """Overwrite the rows of ``tokens`` [n] from their rows' top successors ``id_rows`` [n][k]
        and probabilities ``prob_rows`` [n][k], best first (what :meth:`update` keeps of full logits)."""
        for token, successors, weights in zip(tokens, id_rows, prob_rows):
            self.set_row(token, successors, weights)

    def set_row(self, token: int, successors: Sequence[int], weights: Sequence[float]) -> None:
        """Overwrite one token's row from its successors and their probabilities, best first."""
        self.rows[int(token)] = (tuple(successors[: self.top_k]), tuple(weights[: self.top_k]))


class RecycleDrafter(RetrievalTreeDrafter):
    learns_from_verifier = True  # its successor table is the verifier's top-k (arXiv 2408.08696)
    learns_from_top_rows = True
    """``recycle``: an adjacency table of each token's top-k successors, fed by the target."""

    context_tokens = 1

    def __init__(self, top_k: int = 8):
        self.name = "recycle"
        self.top_k = top_k
        self.table = SuccessorTable(top_k)

    def reset(self) -> None:
        self.table = SuccessorTable(self.top_k)

    def observe(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        """Learn from a target forward: tokens [n], logits [n, vocab]."""
        self.table.update(tokens, logits)

    def successors(self, context: list[int], count: int) -> Children:
        row = self.table.rows.get(context[-1])
        if row is None:
            return Children.empty()
        return Children(row[0][:count], row[1][:count])
