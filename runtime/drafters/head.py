"""Drafting with an EAGLE-style head (``head:DIR``) over its verifier's hidden states.

EAGLE (arXiv 2401.15077) drafts at the feature level: the head's input at position i is the
verifier's feature ``f_i`` and token i+1; while drafting, its own estimate of the next
feature stands in for the verifier's. Feature-level state carries through a round: the
head's KV cache holds positions computed from the verifier's true features (kept across
rounds) and, after drafting, positions computed from its estimates, which the next round
cuts off before it feeds the newly verified positions with their true features.

The head reads the features from the session of the stage that verifies it: the stage
runner calls :meth:`HeadDrafter.attach_verifier`, which makes that session keep its last
hidden states (``ModelSession.keep_features``). So a head drafts for the target directly, or
below a middle model of a hierarchy (whose own features it then reads; how well a head
trained on the target does there is what the profiler measures).

Chains (``propose``) and trees (``propose_tree``: one head forward per depth level, the
tree-attention mask over the head's cache as in :mod:`.model_tree`; static shapes or
best-first growth, EAGLE-2 arXiv 2406.16858). A node's input feature is its parent's
estimate. Greedy or sampled exactly as the model drafters (lossless rejection sampling).
"""

from __future__ import annotations

import torch

from specplan.core.plan import StageShape
from specplan.runtime.drafters.base import Drafter, Proposal, SamplingConfig
from specplan.runtime.drafters.model import choose_token
from specplan.runtime.drafters.model_tree import grow_tree, level_mask
from specplan.runtime.drafters.tree_growth import Growth
from specplan.runtime.session import ModelSession
from specplan.runtime.tree import DraftTree


class HeadSession(ModelSession):
    """The head's KV cache: head position i holds (f_i, token i+1), so ``cached`` is a prefix of
    ``committed[1:]``. ``extend_with`` passes the input features; ``estimates`` [n, hidden] are
    the head's outputs of the last forward (its estimates of the next features)."""

    def __init__(self, head: torch.nn.Module, device: torch.device):
        super().__init__(head, device, cache="dynamic", compiled=False)
        self._pending: torch.Tensor | None = None
        self.estimates: torch.Tensor | None = None

    def extend_with(self, tokens: list[int], features: torch.Tensor, tree=None) -> torch.Tensor:
        """One head forward over ``tokens`` [n] with input features [n, hidden]; logits [n, vocab]."""
        if features.shape[0] != len(tokens):
            raise ValueError(f"{len(tokens)} tokens but {features.shape[0]} feature rows")
        self._pending = features
        try:
            return self.extend(tokens, tree)
        finally:
            self._pending = None

    def _forward(self, tokens: list[int], tree=None, with_features: bool = False) -> torch.Tensor:
        past = len(self.cached)
        input_ids = torch.tensor([tokens], dtype=torch.long, device=self.device)  # [1, n]
        kwargs = {}
        if tree is not None:
            kwargs["attention_mask"] = tree.attention_mask(past, self.model.dtype, self.device)  # [1, 1, n, past + n]
            kwargs["position_ids"] = tree.position_ids(past, self.device)  # [1, n]
        features = None if self._pending is None else self._pending.to(self.device)[None]  # [1, n, hidden]
        output = self.model(input_ids=input_ids, features=features, past_key_values=self.cache, **kwargs)
        self.estimates = output.features[0]  # [n, hidden]
        return output.logits[0].float()  # [n, vocab]


class HeadDrafter(Drafter):
    """Sequence and tree drafter over a :class:`~specplan.runtime.drafters.head_model.DraftHead`."""

    reads_verifier_cache = True  # it drafts from the verifier's hidden states

    def __init__(self, name: str, head: torch.nn.Module, device: torch.device, width: int = 8):
        self.name = name
        self.session = HeadSession(head, device)
        self.verifier: ModelSession | None = None
        self.width = width  # most ranked children per node in best-first growth
        self.true_length = 0  # head positions computed from the verifier's own features

    def sessions(self) -> list[ModelSession]:
        return [self.session]

    def attach_verifier(self, verifier: ModelSession) -> None:
        """Read ``verifier``'s hidden states from now on (its cache restarts so they align)."""
        verifier.keep_features = True
        verifier.reset()
        self.verifier = verifier

    def reset(self) -> None:
        self.session.reset()
        self.true_length = 0

    def _catch_up(self, committed: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed the head every verified position it lacks; logits [1, vocab] and the estimate
        [1, hidden] at the root (they give the first draft token and its feature)."""
        verifier = self.verifier
        if verifier is None or verifier.features is None or len(verifier.cached) != len(committed) - 1:
            raise RuntimeError("a head drafter needs its verifier's features for committed[:-1]; "
                               "build it through build_engine / StageRunner (attach_verifier)")
        self.session.trim(self.true_length)  # positions drafted from estimates go
        uncached = self.session.rewind_to(committed[1:])
        start = len(self.session.cached)
        logits = self.session.extend_with(uncached, verifier.features[start: len(committed) - 1])
        self.true_length = len(self.session.cached)
        return logits[-1:], self.session.estimates[-1:]

    def propose(self, committed: list[int], gamma: int, sampling: SamplingConfig, generator: torch.Generator) -> Proposal:
        if gamma < 1 or len(committed) < 2:
            return Proposal(())
        logits, estimate = self._catch_up(committed)
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for index in range(gamma):
            token, probs = choose_token(logits[-1], sampling, generator)
            tokens.append(token)
            if probs is not None:
                rows.append(probs)
            if index + 1 < gamma:
                logits = self.session.extend_with([token], estimate)
                estimate = self.session.estimates[-1:]
        return Proposal(tuple(tokens), torch.stack(rows) if rows else None)

    def ranks_along(self, committed: list[int], reference: list[int], width: int) -> list[int]:
        """Rank (0-based, -1 beyond ``width``) of each ``reference`` token among the head's greedy
        candidates, the head walking down ``reference`` as if each token had been accepted (its
        own estimates as features, as in a round): the profiler's replay of chains and trees."""
        if not reference or len(committed) < 2:
            return [-1] * len(reference)
        logits, estimate = self._catch_up(committed)
        ranks = []
        for index, token in enumerate(reference):
            top = torch.topk(logits[-1], width).indices.tolist()
            ranks.append(top.index(token) if token in top else -1)
            if index + 1 < len(reference):
                logits = self.session.extend_with([token], estimate)
                estimate = self.session.estimates[-1:]
        return ranks

    def propose_tree(self, committed: list[int], shape: StageShape, sampling: SamplingConfig,
                     generator: torch.Generator) -> DraftTree:
        return self.grow(committed, shape, sampling, generator).draft_tree()

    def grow(self, committed: list[int], shape: StageShape, sampling: SamplingConfig,
             generator: torch.Generator) -> Growth:
        """The grown tree with its node scores (graft prunes by them)."""
        if len(committed) < 2:
            return Growth(committed[-1])
        root_logits, root_estimate = self._catch_up(committed)
        true_length = len(self.session.cached)
        slots: dict[int, int] = {0: true_length - 1}  # growth node -> head cache index
        estimates: dict[int, torch.Tensor] = {0: root_estimate[0]}  # growth node -> its estimate [hidden]

        def level_logits(growth: Growth, nodes: list[int]) -> torch.Tensor:
            return self._forward_level(growth, nodes, slots, estimates, true_length)

        try:
            return grow_tree(level_logits, root_logits, committed[-1], shape, sampling, generator, self.width)
        finally:
            self.session.keep(true_length, [])  # drop every draft node from the cache

    def _forward_level(self, growth: Growth, nodes: list[int], slots: dict[int, int],
                       estimates: dict[int, torch.Tensor], true_length: int) -> torch.Tensor:
        """One head forward over ``nodes`` (all of one depth), each fed its parent's estimate."""
        mask = level_mask(growth, nodes, slots, true_length, len(self.session.cached))
        features = torch.stack([estimates[growth.parents[node]] for node in nodes])  # [n, hidden]
        logits = self.session.extend_with([growth.tokens[node] for node in nodes], features, tree=mask)
        for row, node in enumerate(nodes):
            estimates[node] = self.session.estimates[row]
        return logits
