"""The backend seam: what the runtime needs from a model and its KV cache (docs/architecture.md,
"The session contract").

Every model a plan runs (the target, a hierarchy's middle models, a model drafter) is driven
through a :class:`Session`. Stages, drafters, the engine, the adaptive engine, the profiler and
the bench see only this contract; the torch session (:mod:`specplan.runtime.session`) and the
llama.cpp session (:mod:`specplan.runtime.llama_cpp_session`) implement it. Invariants every
backend keeps:

- ``cached`` lists, in order, the token ids whose keys and values the cache holds at positions
  ``0 .. len(cached) - 1``.
- ``extend(tokens)`` runs one forward over ``tokens`` appended at positions ``len(cached) ..``
  and returns one float32 logits row per token, row i the distribution after token i.
- ``extend_best_tokens(tokens, tree)`` is ``extend(tokens, tree)`` reduced to each row's argmax.
- ``extend(tokens, tree)`` with a :class:`~specplan.runtime.tree.DraftTree` whose node i is
  ``tokens[i]``: node i sits at position ``len(cached) + depth(i)`` and attends to the whole
  cache, its ancestors and itself (tree attention, SpecInfer arXiv 2305.09781); its row is the
  distribution after the path root .. i. All nodes are appended to ``cached`` in node order.
- ``keep(past, nodes)`` after an extend that began at ``past``: only the root-to-leaf ``nodes``
  of that extend stay, at positions ``past ..`` in that order, as if they had been fed as a chain.
- ``trim(length)`` keeps the first ``length`` positions; ``rewind_to(context)`` trims to the
  longest prefix shared with ``context`` and returns what is left to feed.

The shared conformance test (tests/runtime/test_session_conformance.py) checks each backend:
greedy chains equal one-token decodes, a tree's rows equal each path's chain, keep and rewind.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from specplan.runtime.verify import best_tokens

if TYPE_CHECKING:
    from specplan.runtime.tree import DraftTree


class Session(ABC):
    """A model, its KV cache and the token ids that cache holds (the contract in the module doc).

    Attributes every backend sets: ``device`` (where logits live; timing syncs it), ``cached``,
    ``forwards`` (extend calls) and ``forward_seconds`` (their wall time), ``backend`` (a name:
    ``torch`` or ``llama.cpp``), ``keep_features`` / ``features`` (last hidden states a draft
    head reads; a backend that cannot return them refuses ``keep_features = True``).
    """

    backend: str = ""
    device: torch.device
    cached: list[int]
    forwards: int = 0
    forward_seconds: float = 0.0
    features: torch.Tensor | None = None

    @abstractmethod
    def reset(self) -> None:
        """Empty the cache (``cached`` becomes [])."""

    @abstractmethod
    def trim(self, length: int) -> None:
        """Keep only the first ``length`` cached positions (no-op when it holds no more)."""

    @abstractmethod
    def extend(self, tokens: Sequence[int], tree: "DraftTree | None" = None) -> torch.Tensor:
        """One forward over ``tokens`` (a chain, or ``tree``'s nodes); logits [len(tokens), vocab] float32."""

    def extend_best_tokens(self, tokens: Sequence[int], tree: "DraftTree | None" = None) -> list[int]:
        """``extend(tokens, tree)`` for a caller that reads only each row's argmax (the first
        maximum on ties): a greedy round that nothing else watches. A backend may take the argmax
        where the rows lie instead of copying them out. Default: the argmax of ``extend``'s rows."""
        return best_tokens(self.extend(tokens, tree))

    def advance(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` to the cache as a chain ``extend`` would, for a caller that reads none
        of their logits rows (a prompt's prefill when no drafter learns from it). The cache ends up
        exactly as after ``extend``; a backend may skip computing the rows. Default: ``extend``."""
        self.extend(tokens)

    @abstractmethod
    def keep(self, past_length: int, nodes: Sequence[int]) -> None:
        """After an ``extend`` that started at ``past_length``, keep only ``nodes`` of it (root-to-leaf)."""

    def rewind_to(self, context: Sequence[int]) -> list[int]:
        """Trim the cache to its longest prefix shared with ``context``, keeping at least the
        last token of ``context`` uncached; return the uncached suffix of ``context``."""
        shared = 0
        limit = min(len(self.cached), len(context) - 1)
        while shared < limit and self.cached[shared] == context[shared]:
            shared += 1
        self.trim(shared)
        return list(context[shared:])

    @property
    def eos_ids(self) -> frozenset[int]:
        """End-of-sequence ids the model file itself names (llama.cpp's eos and eot); the torch
        backend reads them from the tokenizer and generation config instead (empty here)."""
        return frozenset()

    @property
    def keep_features(self) -> bool:
        return False

    @keep_features.setter
    def keep_features(self, value: bool) -> None:
        if value:
            raise TypeError(f"the {self.backend} backend does not return hidden states; a draft head needs the torch backend")

    @property
    def compile_seconds(self) -> float:
        """Seconds this process spent compiling graphs for this session (0 when nothing compiles)."""
        return 0.0
