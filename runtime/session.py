"""A model with its KV cache and the token ids that cache holds.

Every model in a plan (target, middle models, model drafters) is driven through a
session: ``rewind_to`` trims the cache to what still agrees with the committed text,
``extend`` runs one forward over new tokens (optionally a draft tree with its attention
mask), ``keep`` compacts the cache to an accepted path.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specplan.runtime import kv
from specplan.runtime.timing import now


class ModelSession:
    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.model = model
        self.device = device
        self.cache = kv.new_cache(model)
        self.cached: list[int] = []  # token ids whose keys/values the cache holds, in order
        self.forwards = 0
        self.forward_seconds = 0.0

    def reset(self) -> None:
        self.cache = kv.new_cache(self.model)
        self.cached = []

    def rewind_to(self, context: Sequence[int]) -> list[int]:
        """Trim the cache to its longest prefix shared with ``context``, keeping at least the
        last token of ``context`` uncached; return the uncached suffix of ``context``."""
        shared = 0
        limit = min(len(self.cached), len(context) - 1)
        while shared < limit and self.cached[shared] == context[shared]:
            shared += 1
        if shared < len(self.cached):
            kv.trim(self.cache, shared)
            del self.cached[shared:]
        return list(context[shared:])

    @torch.inference_mode()
    def extend(self, tokens: Sequence[int], tree=None) -> torch.Tensor:
        """One forward over ``tokens`` appended to the cache; returns logits [len(tokens), vocab] (float32).

        With ``tree`` (a DraftTree whose node i is ``tokens[i]``), the forward uses the tree's
        attention mask and depth-based position ids instead of a causal chain.
        """
        start = now(self.device)
        past = len(self.cached)
        input_ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.device)  # [1, n]
        kwargs = {}
        if tree is not None:
            dtype = next(self.model.parameters()).dtype
            kwargs["attention_mask"] = tree.attention_mask(past, dtype, self.device)  # [1, 1, n, past + n]
            kwargs["position_ids"] = tree.position_ids(past, self.device)  # [1, n]
        output = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True, **kwargs)
        self.cached.extend(int(t) for t in tokens)
        logits = output.logits[0].float()  # [n, vocab]
        self.forwards += 1
        self.forward_seconds += now(self.device) - start
        return logits

    def keep(self, past_length: int, nodes: Sequence[int]) -> None:
        """After an ``extend`` that started at ``past_length``, keep only ``nodes`` of it (root-to-leaf)."""
        new_tokens = self.cached[past_length:]
        kv.keep_nodes(self.cache, past_length, nodes)
        self.cached = self.cached[:past_length] + [new_tokens[i] for i in nodes]
