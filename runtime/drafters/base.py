"""What every drafter returns, and the settings drafting shares with verification."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


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
