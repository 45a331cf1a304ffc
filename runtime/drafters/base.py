"""The one drafter interface, what a drafter returns, and the settings drafting shares with
verification (docs/architecture.md, "The drafter interface")."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from specplan.core.errors import TreeError
from specplan.core.parents import check_parents, node_depths
from specplan.runtime.tree import DraftTree

if TYPE_CHECKING:
    from specplan.runtime.session import ModelSession
    from specplan.runtime.stage import StageStats


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


@dataclass(frozen=True)
class TreeShape:
    """What a tree stage grows (docs/planner-math.md section 2).

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
        return max(node_depths(self.parents)) if self.parents else self.depth

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


class Drafter(ABC):
    """Every method the runtime calls on a drafter; nothing is probed with getattr.

    A drafter proposes a chain (:meth:`propose`, for sequence stages) or a tree
    (:meth:`propose_tree`, whose root, node 0, is ``committed[-1]``), or both. The optional
    capabilities have do-nothing defaults that a drafter overrides when it has them:

    - :meth:`observe`: the engine shows it every verifier forward (the tokens fed ``[n]`` and
      the verifier's logits ``[n, vocab]``, row i following token i); Token Recycling (arXiv
      2408.08696) learns its table from them. Set ``learns_from_verifier`` when it does, so
      the profiler computes those logits only for such drafters.
    - :meth:`attach_verifier`: the verifier's session, whose hidden states a draft head reads
      (EAGLE, arXiv 2401.15077). Set ``reads_verifier_cache`` when it does: the verifier's
      cache must then hold every committed token before a proposal, so a middle model's
      catch-up cannot be folded into its next verify forward (:meth:`StageRunner.catch_up`).
    - :meth:`sessions`: the model sessions it runs (the bench compiles and times them).
    - :meth:`stage_stats`: per-stage totals of the stages below it (a hierarchy's middle model).
    """

    name: str
    learns_from_verifier: bool = False
    reads_verifier_cache: bool = False

    @abstractmethod
    def reset(self) -> None:
        """Forget per-prompt state (caches, tables)."""

    def propose(self, committed: list[int], gamma: int, sampling: SamplingConfig, generator: torch.Generator) -> Proposal:
        """Up to ``gamma`` draft tokens (fewer, even none, when the drafter has nothing)."""
        raise TypeError(f"drafter {self.name!r} drafts trees only; give its stage a tree shape")

    def propose_tree(self, committed: list[int], shape: TreeShape, sampling: SamplingConfig,
                     generator: torch.Generator) -> DraftTree:
        """A draft tree of at most ``shape.size`` nodes continuing ``committed``."""
        raise TypeError(f"drafter {self.name!r} drafts sequences only; give its stage a sequence shape")

    def observe(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        """See one verifier forward: ``tokens`` [n] fed, ``logits`` [n, vocab]."""

    def attach_verifier(self, verifier: "ModelSession") -> None:
        """Be told the session of the model that verifies this drafter's stage."""

    def sessions(self) -> list["ModelSession"]:
        """The model sessions this drafter runs (none for a retrieval drafter)."""
        return []

    def stage_stats(self) -> list["StageStats"]:
        """Totals of the stages below this drafter, bottom first (empty unless it is a middle model)."""
        return []


# Tree stages take the same interface; the alias names what a stage expects.
TreeDrafter = Drafter
