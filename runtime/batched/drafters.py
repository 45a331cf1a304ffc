"""Drafters for a batched sequence stage: one proposal per running sequence per round.

- :class:`PerSequenceDrafters`: a retrieval drafter (``ngram:N``) asked once per sequence, one
  host lookup after another (planner-math.md section 11.2 costs it ``b x ms_per_call``).
- :class:`BatchedModelDrafter`: a drafter model (``model:``, ``layerskip:``) run over the whole
  batch, its own :class:`~specplan.runtime.batched.cache.BatchedKV`: one forward catches every
  sequence up to its committed text (ragged rows), then ``gamma - 1`` forwards of one token per
  sequence; greedy (argmax) proposals.

Both are :class:`~specplan.runtime.drafters.base.BatchedDrafter`: ``reset(batch)``,
``propose(committed, gamma)`` (a list of token tuples, one per running sequence, each at most
``gamma[i]`` long) and ``select(indices)``. :class:`PerSequenceDrafters` is how any sequence
:class:`~specplan.runtime.drafters.base.Drafter` becomes a batched one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from specplan.runtime.batched.cache import BatchedKV
from specplan.runtime.drafters.base import BatchedDrafter, Drafter, SamplingConfig

GREEDY = SamplingConfig()


class PerSequenceDrafters(BatchedDrafter):
    """A sequence :class:`Drafter` as a batched one: a fresh drafter per sequence (``factory()``),
    each proposing greedily for its own text."""

    def __init__(self, factory: Callable[[], Drafter]):
        self.factory = factory
        self.name = factory().name
        self.drafters: list[Drafter] = []
        self.generator = torch.Generator().manual_seed(0)

    def reset(self, batch: int) -> None:
        self.drafters = [self.factory() for _ in range(batch)]
        for drafter in self.drafters:
            drafter.reset()

    def propose(self, committed: Sequence[list[int]], gamma: Sequence[int]) -> list[tuple[int, ...]]:
        return [drafter.propose(text, size, GREEDY, self.generator).tokens if size > 0 else ()
                for drafter, text, size in zip(self.drafters, committed, gamma)]

    def select(self, indices: Sequence[int]) -> None:
        self.drafters = [self.drafters[index] for index in indices]


def common_prefix(left: Sequence[int], right: Sequence[int]) -> int:
    """Length of the longest common prefix.

    >>> common_prefix([1, 2, 3], [1, 2, 4, 5])
    2
    """
    size = 0
    for a, b in zip(left, right):
        if a != b:
            break
        size += 1
    return size


class BatchedModelDrafter(BatchedDrafter):
    """A causal LM drafting for every running sequence in the same forwards (greedy chains).

    Invariant: ``fed[i]`` is the token list sequence ``i``'s drafter cache holds. Before drafting
    the cache is rolled back to the longest prefix of ``fed[i]`` that is still committed, short of
    the last committed token (whose logits the first draft token needs).
    """

    def __init__(self, name: str, network: torch.nn.Module, device: torch.device, pad_id: int = 0):
        self.name = name
        self.network = network
        self.device = device
        self.pad_id = pad_id
        self.kv = BatchedKV(network, device, pad_id)
        self.fed: list[list[int]] = []

    def reset(self, batch: int) -> None:
        self.kv = BatchedKV(self.network, self.device, self.pad_id)
        self.fed = [[] for _ in range(batch)]

    def propose(self, committed: Sequence[list[int]], gamma: Sequence[int]) -> list[tuple[int, ...]]:
        steps = max(gamma, default=0)
        if steps < 1:
            return [() for _ in committed]
        kept = [min(common_prefix(fed, text), len(text) - 1) for fed, text in zip(self.fed, committed)]
        if self.kv.batch:
            self.kv.truncate(kept)
        rows = [text[size:] for text, size in zip(committed, kept)]
        self.fed = [list(text) for text in committed]
        logits = self.kv.forward(rows)
        drafts: list[list[int]] = [[] for _ in committed]
        last = [len(row) - 1 for row in rows]
        for step in range(steps):
            tokens = logits[torch.arange(len(rows)), torch.tensor(last)].argmax(dim=-1).tolist()
            for index, token in enumerate(tokens):
                drafts[index].append(int(token))
            if step + 1 == steps:
                break
            logits = self.kv.forward([[token] for token in tokens])
            for index, token in enumerate(tokens):
                self.fed[index].append(int(token))
            last = [0] * len(rows)
        return [tuple(draft[:size]) for draft, size in zip(drafts, gamma)]

    def select(self, indices: Sequence[int]) -> None:
        if self.kv.batch:  # nothing to select before the first proposal
            self.kv.select(indices)
        self.fed = [self.fed[index] for index in indices]
