"""The drafter interfaces, what a drafter returns, and the settings drafting shares with
verification (docs/architecture.md, "The drafter interface"): :class:`Drafter` proposes for one
sequence (sequences decoded together each have drafters of their own: runtime/batcher.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from specplan.core.plan import StageShape
from specplan.runtime.tree import DraftTree

if TYPE_CHECKING:
    from specplan.runtime.backend import Session
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
    # learns only from the top-k of each verifier row, through its ``table`` (``set_row`` /
    # ``update_top``): the adaptive engine may then reduce the forwards to top-k rows first
    learns_from_top_rows: bool = False
    reads_verifier_cache: bool = False

    @abstractmethod
    def reset(self) -> None:
        """Forget per-prompt state (caches, tables)."""

    def propose(self, committed: list[int], gamma: int, sampling: SamplingConfig, generator: torch.Generator) -> Proposal:
        """Up to ``gamma`` draft tokens (fewer, even none, when the drafter has nothing)."""
        raise TypeError(f"drafter {self.name!r} drafts trees only; give its stage a tree shape")

    def propose_tree(self, committed: list[int], shape: StageShape, sampling: SamplingConfig,
                     generator: torch.Generator) -> DraftTree:
        """A draft tree of at most ``shape.size`` nodes continuing ``committed``."""
        raise TypeError(f"drafter {self.name!r} drafts sequences only; give its stage a sequence shape")

    def observe(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        """See one verifier forward: ``tokens`` [n] fed, ``logits`` [n, vocab]."""

    def attach_verifier(self, verifier: "Session") -> None:
        """Be told the session of the model that verifies this drafter's stage."""

    def sessions(self) -> list["Session"]:
        """The model sessions this drafter runs (none for a retrieval drafter)."""
        return []

    def stage_stats(self) -> list["StageStats"]:
        """Totals of the stages below this drafter, bottom first (empty unless it is a middle model)."""
        return []

    def drafters(self) -> list["Drafter"]:
        """This drafter and every drafter it runs (a hierarchy's, a graft's or a plan's candidates)."""
        return [self]

