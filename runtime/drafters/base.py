"""What every drafter returns, and the settings drafting shares with verification."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from specplan.core.errors import TreeError
from specplan.runtime.tree import DraftTree, check_parents


@dataclass(frozen=True)
class SamplingConfig:
    """Decoding settings: temperature 0 = greedy; ``seed`` makes sampling reproducible."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class Proposal:
    """A chain of draft tokens.

    ``draft_probs`` row i is the distribution token i was sampled from (``None`` when every
    token is deterministic: argmax, retrieved or looked up, i.e. a point-mass proposal).
    """

    tokens: tuple[int, ...]  # [gamma]
    draft_probs: torch.Tensor | None = None  # [gamma, vocab] float32


class Drafter(Protocol):
    """Proposes draft tokens continuing ``committed`` (prompt + generated ids so far)."""

    name: str

    def reset(self) -> None:
        """Forget per-prompt state (caches, tables)."""

    def propose(self, committed: list[int], gamma: int, sampling: SamplingConfig, generator: torch.Generator) -> Proposal:
        """Up to ``gamma`` draft tokens (fewer, even none, when the drafter has nothing)."""


@dataclass(frozen=True)
class TreeShape:
    """What a tree stage grows (planner-math.md section 2).

    Either a static ``parents`` array (the planner's DP tree, Sequoia arXiv 2402.12374: node 0
    is the root, the children of a node are the drafter's top-ranked tokens in rank order), or
    ``budget`` nodes (root included: the verifier forward's width) of depth at most ``depth``,
    grown best-first at run time (EAGLE-2 arXiv 2406.16858, DySpec arXiv 2410.11744).

    Raises
    ------
    TreeError
        If ``parents`` is not a tree, or a budget shape has ``budget < 1`` or ``depth < 1``.

    Example
    -------
    >>> TreeShape(parents=(-1, 0, 0, 1)).max_depth, TreeShape(budget=8, depth=3).size
    (2, 8)
    """

    parents: tuple[int, ...] = ()  # [num_nodes] static shape; empty for a budget shape
    budget: int = 0  # nodes, root included (budget shapes)
    depth: int = 0  # depth cap (budget shapes)

    def __post_init__(self) -> None:
        if self.parents:
            object.__setattr__(self, "parents", check_parents(self.parents))
        elif self.budget < 1 or self.depth < 1:
            raise TreeError(
                f"a tree shape needs a parent array or budget >= 1 and depth >= 1 (got budget {self.budget}, "
                f"depth {self.depth}); e.g. budget 16, depth 4"
            )

    @property
    def is_static(self) -> bool:
        return bool(self.parents)

    @property
    def size(self) -> int:
        """Most nodes a tree of this shape has, root included."""
        return len(self.parents) if self.parents else self.budget

    @property
    def max_depth(self) -> int:
        if not self.parents:
            return self.depth
        depth = [0] * len(self.parents)
        for node in range(1, len(self.parents)):
            depth[node] = depth[self.parents[node]] + 1
        return max(depth)

    def capped(self, depth: int) -> "TreeShape | None":
        """The same shape without nodes deeper than ``depth`` (None when ``depth < 1``: no draft)."""
        if depth < 1:
            return None
        if depth >= self.max_depth:
            return self
        if not self.parents:
            return TreeShape(budget=self.budget, depth=depth)
        kept, depths, index = [], [0] * len(self.parents), {0: 0}
        for node, parent in enumerate(self.parents):
            if node:
                depths[node] = depths[parent] + 1
                if depths[node] > depth:
                    continue
                index[node] = len(kept)
            kept.append(-1 if node == 0 else index[parent])
        return TreeShape(parents=tuple(kept))


class TreeDrafter(Protocol):
    """Proposes a draft tree whose root (node 0) is ``committed[-1]``.

    A tree drafter may also define ``observe(tokens, logits)``: the engine calls it after
    every target forward with the tokens fed ``[n]`` and the target's logits ``[n, vocab]``
    (row i follows token i), which Token Recycling (arXiv 2408.08696) learns from.
    """

    name: str

    def reset(self) -> None:
        """Forget per-prompt state (caches, tables)."""

    def propose_tree(self, committed: list[int], shape: TreeShape, sampling: SamplingConfig,
                     generator: torch.Generator) -> DraftTree:
        """A draft tree of at most ``shape.size`` nodes continuing ``committed``."""
