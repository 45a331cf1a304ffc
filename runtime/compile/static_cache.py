"""A preallocated KV cache for speculation: append, tree masks, keep-accepted, rollback.

Every layer's keys and values live in one buffer [batch, kv_heads, capacity, head_dim],
allocated at the first forward (so it takes the dtype and device the model computes in) and
reused for every step. The cache keeps a Python length pointer: positions ``0..length-1`` are
valid, everything past it is scratch.

- Before a forward of ``n`` new tokens, :meth:`StaticKVCache.begin` sets where they are written
  (``write_index``: ``length .. length+n-1``) and how many positions attention reads
  (``kv_length``, at least ``length + n``). Each layer's ``update`` copies the new keys and values
  in place (``index_copy_``) and returns the first ``kv_length`` rows; the attention mask must
  cover exactly those ``kv_length`` columns (transformers passes a 4-D mask through unchanged;
  without one it builds the causal mask from ``get_seq_length`` and ``get_mask_sizes``).
- :meth:`commit` moves the pointer past the tokens that count (padding rows stay scratch).
- Rollback (:meth:`trim`) only moves the pointer; the rows beyond it are overwritten later.
- Keep-only-accepted (:meth:`keep_nodes`) gathers the accepted tree rows into place right
  after the prefix, on every layer, and moves the pointer (SpecInfer, arXiv 2305.09781, keeps
  the accepted path the same way).

The buffers grow (doubling, one copy) only when a forward would overflow them, so a session
that is given a realistic ``capacity`` never reallocates. The buffers are marked as static
addresses for ``torch.compile`` (CUDA graphs need them), as transformers' ``StaticLayer`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

DEFAULT_CAPACITY = 1024


class SlotLayer(CacheLayerMixin):
    """One layer's keys and values in a preallocated buffer, written where its cache says."""

    is_compileable = True
    is_sliding = False

    def __init__(self, owner: "StaticKVCache"):
        super().__init__()
        self.owner = owner

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        batch, heads = key_states.shape[:2]
        capacity = self.owner.capacity
        with torch.inference_mode(False):  # normal tensors: compaction runs outside inference mode too
            self.keys = torch.zeros((batch, heads, capacity, key_states.shape[-1]), dtype=self.dtype, device=self.device)
            self.values = torch.zeros((batch, heads, capacity, value_states.shape[-1]), dtype=self.dtype, device=self.device)
        _mark_static(self.keys, self.values)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the new rows at ``owner.write_index``; return the first ``owner.kv_length`` rows."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys.index_copy_(2, self.owner.write_index, key_states)
        self.values.index_copy_(2, self.owner.write_index, value_states)
        limit = self.owner.kv_length
        return self.keys[:, :, :limit], self.values[:, :, :limit]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.owner.kv_length, 0

    def get_seq_length(self) -> int:
        return self.owner.length

    def get_max_length(self) -> int:
        return self.owner.capacity

    def resize(self, capacity: int, keep: int) -> None:
        """New buffers of ``capacity`` rows holding the first ``keep`` rows of the old ones."""
        if not self.is_initialized:
            return
        for name in ("keys", "values"):
            old = getattr(self, name)
            with torch.inference_mode(False):
                new = torch.zeros((*old.shape[:2], capacity, old.shape[-1]), dtype=old.dtype, device=old.device)
                new[:, :, :keep] = old[:, :, :keep]
            _mark_static(new)
            setattr(self, name, new)


class StaticKVCache(Cache):
    """A transformers ``Cache`` over preallocated buffers with a movable length pointer."""

    def __init__(self, num_layers: int, device: torch.device | str, capacity: int = DEFAULT_CAPACITY):
        self.capacity = int(capacity)
        self.length = 0  # valid positions
        self.kv_length = 0  # positions the next forward's attention reads
        self.device = torch.device(device)
        self.write_index = torch.zeros(0, dtype=torch.long, device=self.device)
        super().__init__(layers=[SlotLayer(self) for _ in range(num_layers)])

    def begin(self, count: int, kv_length: int | None = None) -> None:
        """Prepare a forward that writes ``count`` rows after the valid ones and attends to
        ``kv_length`` positions (default: exactly the valid ones plus the new ones)."""
        end = self.length + count
        kv_length = end if kv_length is None else kv_length
        if kv_length < end:
            raise ValueError(f"kv_length {kv_length} is shorter than the {end} positions the forward needs")
        if kv_length > self.capacity:
            self.grow(kv_length)
        self.write_index = torch.arange(self.length, end, dtype=torch.long, device=self.device)
        self.kv_length = kv_length

    def commit(self, count: int) -> None:
        """The first ``count`` rows written by the last forward are now valid."""
        self.length += count

    def trim(self, length: int) -> None:
        """Roll back to the first ``length`` positions (no copy)."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot trim a cache of {self.length} positions to {length}")
        self.length = length

    def keep_nodes(self, past_length: int, nodes: Sequence[int]) -> None:
        """After a forward over nodes at ``past_length + i``, keep only ``nodes`` (in this order)."""
        nodes = [int(node) for node in nodes]
        if nodes == list(range(len(nodes))):
            self.trim(past_length + len(nodes))
            return
        if past_length + max(nodes) >= self.length:
            raise ValueError(f"node {max(nodes)} is not in the cache ({self.length - past_length} new positions)")
        source = torch.tensor(nodes, dtype=torch.long, device=self.device) + past_length
        end = past_length + len(nodes)
        for layer in self.layers:
            if layer.is_initialized:  # index_select copies first, so overlapping rows are safe
                layer.keys[:, :, past_length:end] = layer.keys.index_select(2, source)
                layer.values[:, :, past_length:end] = layer.values.index_select(2, source)
        self.length = end

    def grow(self, needed: int) -> None:
        """Reallocate every layer to at least ``needed`` rows (doubling), keeping the valid ones."""
        capacity = self.capacity
        while capacity < needed:
            capacity *= 2
        for layer in self.layers:
            layer.resize(capacity, self.length)
        self.capacity = capacity


def _mark_static(*tensors: torch.Tensor) -> None:
    """Tell torch.compile these buffers keep their address (needed by CUDA graphs)."""
    from transformers.utils import is_torchdynamo_compiling

    if not is_torchdynamo_compiling():
        for tensor in tensors:
            torch._dynamo.mark_static_address(tensor)


def new_static_cache(model: torch.nn.Module, device: torch.device | str,
                     capacity: int = DEFAULT_CAPACITY) -> StaticKVCache:
    """An empty static cache with one layer per decoder layer of ``model``'s config.

    A layer-skip view keeps its layers' original indices, so the config's count covers it;
    layers the view skips are never written and never allocated.
    """
    config = model.config.get_text_config(decoder=True)
    return StaticKVCache(config.num_hidden_layers, device, capacity)
