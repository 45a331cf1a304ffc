"""Retrieval tree drafters: tables that propose ranked next tokens for a context, at no model cost.

A table drafter defines ``successors(context, count)``: the ranked candidates for the token
after ``context`` (the tail of the committed text followed by the path of a draft node), with
a weight in (0, 1] each (its share among the candidates, or a rank prior). The tree is grown
with the same rules as a model tree (:mod:`.tree_growth`): to the planner's static shape, or
best-first by the product of weights, breadth-first level by level (Token Recycling, arXiv
2408.08696; Cacheback, arXiv 2511.21699). Every proposal is deterministic (a point-mass
draft distribution), at any temperature. ``propose`` gives the rank-0 chain, so that every
table drafter also serves sequence stages.
"""

from __future__ import annotations

import torch

from specplan.core.plan import StageShape
from specplan.runtime.drafters.base import Drafter, Proposal, SamplingConfig
from specplan.runtime.drafters.tree_growth import Children, Growth, grow_best_first, grow_static
from specplan.runtime.tree import DraftTree


def unseen_start(seen: list[int], committed: list[int]) -> int | None:
    """First index of ``committed`` a table has not indexed yet, or None when ``committed``
    does not continue ``seen`` (another prompt: the table must start over).

    >>> unseen_start([1, 2], [1, 2, 3]), unseen_start([1, 2], [1, 5, 3])
    (2, None)
    """
    if len(committed) < len(seen) or committed[: len(seen)] != seen:
        return None
    return len(seen)


class RetrievalTreeDrafter(Drafter):
    """Base class: subclasses set ``name`` and ``context_tokens`` and define ``successors``."""

    name = "retrieval"
    context_tokens = 1  # how many trailing tokens of context a lookup reads
    width = 8  # most ranked children per node in best-first growth

    def reset(self) -> None:
        """Forget per-prompt state."""

    def prepare(self, committed: list[int]) -> None:
        """Index whatever of ``committed`` is new since the last call."""

    def successors(self, context: list[int], count: int) -> Children:
        """At most ``count`` ranked candidates for the token after ``context``."""
        raise NotImplementedError

    def grow(self, committed: list[int], shape: StageShape, sampling: SamplingConfig | None = None,
             generator: torch.Generator | None = None) -> Growth:
        """The tree grown from the root ``committed[-1]`` (sampling settings are not needed)."""
        self.prepare(committed)
        tail = list(committed[-self.context_tokens:])

        def expand(growth: Growth, nodes: list[int], counts: list[int]) -> list[Children]:
            return [self.successors(tail + growth.path_tokens(node), count) for node, count in zip(nodes, counts)]

        if shape.is_static:
            return grow_static(expand, committed[-1], shape.parents)
        return grow_best_first(expand, committed[-1], shape.budget, shape.depth, self.width)

    def propose_tree(self, committed: list[int], shape: StageShape, sampling: SamplingConfig,
                     generator: torch.Generator) -> DraftTree:
        return self.grow(committed, shape, sampling, generator).draft_tree()

    def propose(self, committed: list[int], gamma: int, sampling: SamplingConfig, generator: torch.Generator) -> Proposal:
        """Sequence stages: the chain of rank-0 candidates, up to ``gamma`` tokens."""
        return Proposal(tuple(self.rank0_chain(committed, gamma)))

    def rank0_chain(self, committed: list[int], gamma: int) -> list[int]:
        """The rank-0 chain after ``committed``, up to ``gamma`` tokens, shorter where a lookup has no
        candidate: the static chain shape's tree (:meth:`grow`), without building the tree."""
        if gamma < 1:
            return []
        self.prepare(committed)
        tail, path = list(committed[-self.context_tokens:]), []
        while len(path) < gamma:
            children = self.successors(tail + path, 1)
            if not children.tokens:
                break
            path.append(int(children.tokens[0]))
        return path
