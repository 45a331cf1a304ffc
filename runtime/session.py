"""A model with its KV cache and the token ids that cache holds.

Every model in a plan (target, middle models, model drafters) is driven through a
session: ``rewind_to`` trims the cache to what still agrees with the committed text,
``extend`` runs one forward over new tokens (optionally a draft tree with its attention
mask), ``keep`` compacts the cache to an accepted path.

The cache is transformers' ``DynamicCache`` (``cache="dynamic"``) or our preallocated
:class:`~specplan.runtime.compile.static_cache.StaticKVCache` (``cache="static"``, sized for
``max_length`` positions; it grows by doubling if a forward would overflow it). With
``compiled=True`` (static cache only) steps of up to 64 tokens run a compiled forward: an
ahead-of-time package with runtime ``compiled`` (:mod:`specplan.runtime.compile.aot_store`), a
torch.compile'd forward with widths bucketed with runtime ``jit`` (:mod:`specplan.runtime.compile.compiled`). Left unset, both follow the
session's ``runtime`` (:class:`specplan.core.runtime_modes.RuntimeMode`; default ``eager``: the dynamic cache).

With ``keep_features`` set (a draft head reads them: EAGLE, arXiv 2401.15077), every forward
also returns the model's last hidden state (the final norm's output, what the LM head reads)
and ``features`` [len(cached), hidden] stays aligned with ``cached`` through extend, keep and
rewind (compiled steps return the hidden states beside the logits, so a head plan keeps the
compiled verifier).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch

from specplan.runtime import kv
from specplan.runtime.backend import Session
from specplan.runtime.compile.model_steps import model_step
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.runtime.compile.static_cache import DEFAULT_CAPACITY, new_static_cache
from specplan.runtime.timing import now


def keeps_last_logits(model: torch.nn.Module) -> bool:
    """Whether ``model``'s forward takes transformers' ``logits_to_keep`` (its LM head over the last rows only)."""
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def as_session(model: "torch.nn.Module | Session", device: torch.device, runtime: RuntimeMode = EAGER) -> Session:
    """``model`` itself when it is already a session (any backend), else a torch session over it."""
    return model if isinstance(model, Session) else ModelSession(model, device, runtime=runtime)


class ModelSession(Session):
    """``model``, its KV cache and the token ids the cache holds: the torch backend of the
    session contract (:class:`~specplan.runtime.backend.Session`).

    ``cache``: ``dynamic`` or ``static``; ``max_length``: positions a static cache holds before it
    grows; ``compiled``: compiled steps (static cache only). Unset, they follow ``runtime`` (default
    eager; an explicit ``cache="dynamic"`` also turns compilation off).
    """

    backend = "torch"
    keep_features = False  # a plain attribute here: set by a draft head that reads this model's hidden states

    def __init__(self, model: torch.nn.Module, device: torch.device, cache: str | None = None,
                 max_length: int = DEFAULT_CAPACITY, compiled: bool | None = None, runtime: RuntimeMode = EAGER):
        defaults = runtime.session_options()
        self.model = model
        self.device = torch.device(device)
        self.cache_kind = cache or defaults["cache"]
        if self.cache_kind not in ("dynamic", "static"):
            raise ValueError(f"unknown cache {cache!r}; use dynamic or static")
        self.compiled = defaults["compiled"] and self.cache_kind == "static" if compiled is None else compiled
        if self.compiled and self.cache_kind != "static":
            raise ValueError("compiled steps need cache='static'")
        self.max_length = max_length
        self.step = None
        if self.compiled:
            self.step = model_step(model, self.device, runtime)
        self.cache = self._new_cache()
        self.cached: list[int] = []  # token ids whose keys/values the cache holds, in order
        self.keep_features = False  # set by a draft head that reads this model's hidden states
        self.features: torch.Tensor | None = None  # [len(cached), hidden] when keep_features
        self.forwards = 0
        self.forward_seconds = 0.0

    def _new_cache(self):
        if self.cache_kind == "static":
            return new_static_cache(self.model, self.device, self.max_length)
        return kv.new_cache(self.model)

    def reset(self) -> None:
        if self.cache_kind == "static":
            self.cache.trim(0)  # keep the buffers: a static cache is allocated once
        else:
            self.cache = kv.new_cache(self.model)
        self.cached = []
        self.features = None

    def trim(self, length: int) -> None:
        """Keep only the first ``length`` cached positions (no-op when it holds no more)."""
        if length < len(self.cached):
            kv.trim(self.cache, length)
            del self.cached[length:]
            if self.features is not None:
                self.features = self.features[:length]

    @torch.inference_mode()
    def extend(self, tokens: Sequence[int], tree=None) -> torch.Tensor:
        """One forward over ``tokens`` appended to the cache; returns logits [len(tokens), vocab] (float32),
        a tensor no later forward writes (a CUDA graph's output buffers are cloned), so a reader may
        keep it for a few rounds (the adaptive engine's live scores do).

        With ``tree`` (a DraftTree whose node i is ``tokens[i]``), the forward uses the tree's
        attention mask and depth-based position ids instead of a causal chain.
        """
        start = now(self.device)
        tokens = [int(t) for t in tokens]
        if self._use_compiled(len(tokens)):
            logits, hidden = self.step.run(self.cache, tokens, tree)  # [n, vocab], [n, hidden]
            logits = logits.float()
            if self.keep_features:
                self._append_features(hidden)
        else:
            logits = self._forward(tokens, tree, with_features=self.keep_features)
        self._appended(tokens, start)
        return logits

    @torch.inference_mode()
    def advance(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` as :meth:`extend` does, the LM head run for the last one only (transformers'
        ``logits_to_keep``): a prompt's prefill nobody reads skips the head's ``n x vocab`` product (a fifth
        of SmolLM2's work per token) and its float32 copy. The cache is the one :meth:`extend` leaves (the
        keys and values come before the head). A compiled step, a draft head reading the hidden states or a
        model without the argument: :meth:`extend`."""
        if self.keep_features or self._use_compiled(len(tokens)) or not keeps_last_logits(self.model):
            self.extend(tokens)
            return
        start = now(self.device)
        tokens = [int(t) for t in tokens]
        self._forward(tokens, logits_to_keep=1)
        self._appended(tokens, start)

    def _appended(self, tokens: list[int], start: float) -> None:
        self.cached.extend(tokens)
        self.forwards += 1
        self.forward_seconds += now(self.device) - start

    def _use_compiled(self, count: int) -> bool:
        """Compiled steps serve bucketed widths once the cache buffers exist (the first forward,
        usually a prefill, allocates them eagerly)."""
        from specplan.runtime.compile.compiled import bucket_of

        return self.step is not None and self.cache.layers[0].is_initialized and bucket_of(count) is not None

    def _forward(self, tokens: list[int], tree=None, with_features: bool = False, logits_to_keep: int = 0) -> torch.Tensor:
        """transformers' forward over either cache; logits [n, vocab] float32 (the last ``logits_to_keep`` rows
        only, when it is not 0).

        ``with_features``: run the decoder and the LM head apart (the same arithmetic as the
        model's own forward) and append the last hidden states [n, hidden] to ``features``.
        """
        past = len(self.cached)
        input_ids = torch.tensor([tokens], dtype=torch.long, device=self.device)  # [1, n]
        kwargs = {"logits_to_keep": logits_to_keep} if logits_to_keep else {}
        if tree is not None:
            dtype = next(self.model.parameters()).dtype
            kwargs["attention_mask"] = tree.attention_mask(past, dtype, self.device)  # [1, 1, n, past + n]
            kwargs["position_ids"] = tree.position_ids(past, self.device)  # [1, n]
        if self.cache_kind == "static":
            self.cache.begin(len(tokens))  # attention reads exactly past + n positions
        if with_features:
            output = self.model.get_decoder()(input_ids=input_ids, past_key_values=self.cache, use_cache=True, **kwargs)
            hidden = output.last_hidden_state[0]  # [n, hidden]
            logits = self.model.get_output_embeddings()(hidden)  # [n, vocab]
            self._append_features(hidden)
        else:
            logits = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True, **kwargs).logits[0]
        if self.cache_kind == "static":
            self.cache.commit(len(tokens))
        return logits.float()  # [n, vocab]

    def _append_features(self, hidden: torch.Tensor) -> None:
        self.features = hidden if self.features is None else torch.cat([self.features, hidden])

    @property
    def compile_seconds(self) -> float:
        """Seconds this process spent compiling graphs for this session's model (0 when eager)."""
        return self.step.compile_seconds if self.step is not None else 0.0

    def keep(self, past_length: int, nodes: Sequence[int]) -> None:
        """After an ``extend`` that started at ``past_length``, keep only ``nodes`` of it (root-to-leaf)."""
        new_tokens = self.cached[past_length:]
        kv.keep_nodes(self.cache, past_length, nodes)
        self.cached[past_length:] = [new_tokens[i] for i in nodes]  # the tail only, in place
        if self.features is not None:
            rows = torch.tensor([past_length + i for i in nodes], dtype=torch.long, device=self.features.device)
            self.features = torch.cat([self.features[:past_length], self.features.index_select(0, rows)])
