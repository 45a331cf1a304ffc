"""KV-cache bookkeeping for speculation: trim to a length, keep only an accepted path.

Works on transformers' ``DynamicCache`` (5.x): tensors at ``cache.layers[i].keys`` /
``.values`` of shape [batch, kv_heads, seq, head_dim]; and on our preallocated
:class:`~specplan.runtime.compile.static_cache.StaticKVCache`, which does both by moving its length
pointer and gathering rows in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache

from specplan.runtime.compile.static_cache import StaticKVCache


def new_cache(model: torch.nn.Module) -> DynamicCache:
    """An empty dynamic cache for ``model``."""
    return DynamicCache(config=model.config)


def cache_length(cache: DynamicCache) -> int:
    """Number of cached positions."""
    return int(cache.get_seq_length())


def trim(cache: DynamicCache, length: int) -> None:
    """Drop cached positions beyond ``length`` (keep the first ``length``)."""
    if isinstance(cache, StaticKVCache):
        cache.trim(length)
        return
    excess = cache_length(cache) - length
    if excess < 0:
        raise ValueError(f"cannot trim a cache of {cache_length(cache)} positions to {length}")
    if excess:
        cache.crop(-excess)


def keep_nodes(cache: DynamicCache, past_length: int, nodes: Sequence[int]) -> None:
    """After a forward over tree nodes at positions ``past_length + i``, keep only ``nodes``.

    ``nodes`` are indices into that forward's new tokens, in root-to-leaf order (an accepted
    path). When they are a prefix 0..k-1 this is a plain trim; otherwise every layer's keys and
    values are gathered with ``index_select`` along the sequence axis.
    """
    if isinstance(cache, StaticKVCache):
        cache.keep_nodes(past_length, nodes)
        return
    nodes = list(nodes)
    if nodes == list(range(len(nodes))):
        trim(cache, past_length + len(nodes))
        return
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None:
            continue  # a layer a layer-skip view never runs holds nothing
        device = layer.keys.device
        keep = torch.cat(
            [torch.arange(past_length, device=device), torch.tensor(nodes, device=device) + past_length]
        )
        layer.keys = layer.keys.index_select(-2, keep)
        layer.values = layer.values.index_select(-2, keep)
