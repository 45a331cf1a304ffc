"""One KV cache for ``b`` sequences that each keep their own rows: ragged forwards, per-sequence
rollback, padding masked: the cache of torch slot sessions (runtime/torch_shared.py; docs/guide.md,
"Batched runs").

Layout: a transformers ``DynamicCache`` of ``[b, kv_heads, slots, head_dim]`` whose layers keep spare
room along the slot axis (:class:`SlotLayer`: a forward writes in place), and a 0/1 ``mask`` ``[b, slots]``:
slot ``j`` of sequence ``i`` holds one of its tokens iff ``mask[i, j] == 1``. A forward may cover some
sequences only (the others have nothing to decode): it runs over their rows alone, and the others' new
slots are holes. A forward over rows of different lengths pads the short rows on the right
and marks the padding 0; a rollback marks a sequence's rejected slots 0. Every forward passes
the mask as the 2-D ``attention_mask`` (transformers builds the causal mask from it over the
physical slots) and each sequence's *logical* positions as ``position_ids`` (the count of its
kept slots) with the physical slots as ``cache_position`` (a layer-skip view may not run layer
0, whose length transformers would otherwise read), so a sequence's tokens attend to exactly
its own kept tokens at exactly the positions they would have alone: the holes change nothing
but the work done.

Slots no sequence keeps at the end of the cache are cropped; holes in the middle stay until
they are more than ``COMPACT_HOLES`` of the slots of the sequences holding tokens, when
:meth:`BatchedKV.compact` packs every sequence's kept slots to the right.

Every padded query row comes after at least one real token of its own sequence (rows are padded
on the right), so no query row is fully masked and no padding produces NaN keys or values.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from specplan.core.errors import SpecplanError
from specplan.runtime.session import keeps_last_logits
from specplan.runtime.tree import DraftTree

COMPACT_HOLES = 0.25  # pack the cache when more than this share of its slots are holes
FIRST_CAPACITY = 256  # slots a layer's buffer first holds; it doubles when full


class SlotLayer(DynamicLayer):
    """A transformers cache layer whose keys and values sit in buffers with room to grow along the slot axis:
    a forward writes its new slots in place instead of concatenating (which copies the whole cache every
    forward), and a forward over some sequences only (:meth:`BatchedKV.forward` with ``sequences``) writes their
    rows alone, ``sequences`` set to their rows (a slice when consecutive: no copy; else an index). The other
    rows' new slots keep what the buffer held (zeros, or a dropped slot's values: finite either way, and
    masked). ``batch``: the rows the buffers hold."""

    def __init__(self, batch: int):
        super().__init__()
        self.batch = batch
        self.sequences: slice | torch.Tensor = slice(None)

    @property
    def keys(self) -> torch.Tensor | None:
        return None if self._keys is None else self._keys[:, :, : self.length]

    @keys.setter
    def keys(self, tensor: torch.Tensor | None) -> None:  # a whole new cache (a pack, a reset): no spare room
        self._keys = tensor if tensor is not None and tensor.dim() == 4 else None
        self.length = 0 if self._keys is None else self._keys.shape[-2]

    @property
    def values(self) -> torch.Tensor | None:
        return None if self._values is None else self._values[:, :, : self.length]

    @values.setter
    def values(self, tensor: torch.Tensor | None) -> None:
        self._values = tensor if tensor is not None and tensor.dim() == 4 else None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if self._keys is None or end > self._keys.shape[-2]:
            self._keys, self._values = (self._grown(buffer, states, end)
                                        for buffer, states in ((self._keys, key_states), (self._values, value_states)))
        rows = self.sequences
        self._keys[rows, :, self.length:end] = key_states
        self._values[rows, :, self.length:end] = value_states
        self.length = end
        return self._keys[rows, :, :end], self._values[rows, :, :end]

    def _grown(self, buffer: torch.Tensor | None, states: torch.Tensor, end: int) -> torch.Tensor:
        """A buffer of at least ``end`` slots (twice the old room, or ``FIRST_CAPACITY``) holding ``buffer``'s kept slots."""
        room = max(end, 2 * buffer.shape[-2] if buffer is not None else FIRST_CAPACITY)
        grown = states.new_zeros((self.batch, states.shape[1], room, states.shape[-1]))
        if buffer is not None:
            grown[:, :, : self.length] = buffer[:, :, : self.length]
        return grown

    def crop(self, tokens_to_remove: int) -> None:
        """Forget the last ``-tokens_to_remove`` slots (their room stays for the next forward)."""
        if tokens_to_remove < 0 and self.is_initialized:
            self.length = max(0, self.length + tokens_to_remove)


class BatchedKV:
    """The cache of ``model`` over a batch; ``pad_id`` fills the padding (masked, never attended);
    ``compact_holes``: the share of hole slots above which the cache is packed (1: never)."""

    def __init__(self, model: torch.nn.Module, device: torch.device, pad_id: int = 0,
                 compact_holes: float = COMPACT_HOLES):
        self.model = model
        self.compact_holes = compact_holes
        self.device = device
        self.pad_id = pad_id
        self.cache = DynamicCache(config=model.config)
        self._slotted = False  # the cache's layers are SlotLayers (made before the first forward)
        self.mask = torch.zeros((0, 0), dtype=torch.long, device=device)  # [b, slots]
        self.last_width = 0

    @property
    def batch(self) -> int:
        return int(self.mask.shape[0])

    @property
    def slots(self) -> int:
        return int(self.mask.shape[1])

    def lengths(self) -> list[int]:
        """Tokens each sequence has in the cache (its next logical position)."""
        return self.mask.sum(dim=1).tolist()

    def forward(self, rows: Sequence[Sequence[int]], trees: Sequence[DraftTree] | None = None,
                sequences: Sequence[int] | None = None, logits_to_keep: int = 0) -> torch.Tensor:
        """Run ``model`` over one row of new tokens per sequence (each row non-empty; the first call
        sets the batch). Returns logits ``[b, width, vocab]``; row ``i``'s position ``k`` follows its
        token ``k`` (positions past ``len(rows[i])`` are padding: ignore them). Every new slot is
        kept until :meth:`drop` says otherwise.

        With ``trees`` (row ``i`` is the token list of ``trees[i]``), each row's tokens attend to
        their sequence's kept slots and to their tree ancestors only, at positions ``length +
        depth`` (:meth:`tree_mask`): one verify forward over every sequence's draft tree.

        ``sequences``: the forward covers only these sequences (ascending), ``rows[i]`` being sequence
        ``sequences[i]``'s (:meth:`_forward_some`); the logits are ``[len(sequences), width, vocab]``.
        ``logits_to_keep`` (not 0, and the model takes it): the LM head runs for the last that many padded
        positions only (nobody reads the rows: a prefill), the logits ``[b, logits_to_keep, vocab]``.
        """
        if self.slots == 0 and self.batch == 0:
            self.mask = torch.zeros((len(rows), 0), dtype=torch.long, device=self.device)
        self._slot_layers()
        if sequences is not None and len(sequences) < self.batch:
            return self._forward_some(rows, trees, list(sequences), logits_to_keep)
        if len(rows) != self.batch or min(len(row) for row in rows) < 1:
            raise ValueError(f"a batched forward needs one non-empty row per sequence ({self.batch}); got "
                             f"{[len(row) for row in rows]}")
        width = max(len(row) for row in rows)
        ids = torch.full((self.batch, width), self.pad_id, dtype=torch.long)
        new = torch.zeros((self.batch, width), dtype=torch.long)
        for index, row in enumerate(rows):
            ids[index, : len(row)] = torch.tensor(list(row), dtype=torch.long)
            new[index, : len(row)] = 1
        lengths = self.mask.sum(dim=1, keepdim=True)
        if trees is None:
            positions = lengths + torch.arange(width, device=self.device)
        else:
            offsets = [list(tree.depth) + list(range(tree.num_nodes, width)) for tree in trees]
            positions = lengths + torch.tensor(offsets, dtype=torch.long, device=self.device)
        slots = torch.arange(self.slots, self.slots + width, device=self.device)  # physical: the causal mask's axis
        attention = None if trees is None else self.tree_mask(trees, width)  # built over the past slots
        self.mask = torch.cat([self.mask, new.to(self.device)], dim=1)
        if attention is None:
            attention = self.mask
        self.last_width = width
        pruned = {"logits_to_keep": logits_to_keep} if logits_to_keep and keeps_last_logits(self.model) else {}
        with torch.no_grad():
            output = self.model(input_ids=ids.to(self.device), attention_mask=attention, position_ids=positions,
                                cache_position=slots, past_key_values=self.cache, use_cache=True, **pruned)
        return output.logits

    def _slot_layers(self) -> None:
        """Make the cache's layers :class:`SlotLayer` over this batch (once, before its first forward)."""
        if self._slotted:
            return
        layers = self.cache.layers
        if any(type(layer) is not DynamicLayer or layer.is_initialized for layer in layers):
            kinds = sorted({type(layer).__name__ for layer in layers})
            raise SpecplanError(f"sequences decoded together need full-attention cache layers; this model's are {kinds}: "
                                "run one sequence at a time")
        self.cache.layers = [SlotLayer(self.batch) for _ in layers]
        self._slotted = True

    def _forward_some(self, rows, trees, sequences: list[int], logits_to_keep: int = 0) -> torch.Tensor:
        """:meth:`forward` over some sequences only: the forward runs over their rows of the mask and of every
        layer's buffers (:class:`SlotLayer`), so a sequence with nothing to decode costs no work; the others'
        new slots are holes."""
        consecutive = sequences == list(range(sequences[0], sequences[-1] + 1))
        selected = (slice(sequences[0], sequences[-1] + 1) if consecutive
                    else torch.tensor(sequences, dtype=torch.long, device=self.device))
        full_mask = self.mask
        self.mask = full_mask[selected]
        for layer in self.cache.layers:
            layer.sequences = selected
        try:
            logits = self.forward(rows, trees, logits_to_keep=logits_to_keep)
        except BaseException:
            self.mask = full_mask
            raise
        finally:
            for layer in self.cache.layers:
                layer.sequences = slice(None)
        grown = full_mask.new_zeros((full_mask.shape[0], self.mask.shape[1]))
        grown[:, : full_mask.shape[1]] = full_mask
        grown[selected] = self.mask
        self.mask = grown
        return logits

    def tree_mask(self, trees: Sequence[DraftTree], width: int) -> torch.Tensor:
        """Additive float mask ``[b, 1, width, slots + width]`` of a tree forward (0: attended).

        Row ``k`` of sequence ``i`` sees the sequence's kept slots, then node ``k``'s ancestors and
        itself in the new block; a padding row sees the kept slots and itself, so no row is fully
        masked. transformers 5 passes a 4-D float mask unchanged to eager and sdpa attention
        (:meth:`~specplan.runtime.tree.DraftTree.attention_mask`, the same convention at batch 1).
        """
        past = self.slots
        allowed = torch.zeros((self.batch, width, past + width), dtype=torch.bool, device=self.device)
        allowed[:, :, :past] = self.mask.bool().unsqueeze(1)  # on the device: no copy of the cache's mask
        allowed[:, :, past:] = torch.eye(width, dtype=torch.bool, device=self.device)
        for index, tree in enumerate(trees):
            nodes = tree.num_nodes
            allowed[index, :nodes, past: past + nodes] = tree.ancestor_mask().to(self.device)
        dtype = next(self.model.parameters()).dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=self.device)
        return mask.masked_fill_(~allowed, torch.finfo(dtype).min).unsqueeze(1)

    def drop(self, indices: Sequence[int], slots: torch.Tensor) -> None:
        """The sequences ``indices`` no longer keep the physical ``slots`` (a keep or trim, the others as they
        are); then trailing slots no sequence keeps are cropped, and the cache may be packed, which moves
        every slot: one call per change."""
        if len(indices) and slots.numel():
            rows = torch.tensor(list(indices), dtype=torch.long, device=self.device).unsqueeze(1)
            self.mask[rows, slots.to(self.device).unsqueeze(0)] = 0
        self._crop()

    def restore(self, mask: torch.Tensor) -> None:
        """Back to the cache ``mask`` described before a forward that raised: whatever slots it appended, in
        any layer, are cut."""
        slots = mask.shape[1]
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is not None and layer.keys.shape[-2] > slots:
                layer.crop(slots - layer.keys.shape[-2])
        self.mask = mask

    def holes(self) -> int:
        """Masked slots of the sequences that hold tokens: the work their forwards spend on padding and rejected
        tokens (a sequence holding none, a free slot, takes no part in a forward)."""
        return self._rows_in_use() * self.slots - int(self.mask.sum())

    def _rows_in_use(self) -> int:
        return int(self.mask.any(dim=1).sum())

    def compact(self) -> None:
        """Pack every sequence's kept slots to the right end (padding on the left), the slot count
        becoming the longest sequence's length. Kept slots keep their order, so attention is unchanged."""
        lengths = self.mask.sum(dim=1)
        longest = int(lengths.max()) if self.batch else 0
        if longest == self.slots:
            return
        # Kept slots first in their order, holes after; then rotate each row so its kept ones end the row.
        order = torch.argsort(1 - self.mask, dim=1, stable=True)[:, :longest]  # [b, longest]
        shift = longest - lengths
        columns = (torch.arange(longest, device=self.device).unsqueeze(0) - shift.unsqueeze(1)) % longest
        source = order.gather(1, columns)  # new column c holds old slot source[:, c]
        new_mask = (torch.arange(longest, device=self.device).unsqueeze(0) >= shift.unsqueeze(1)).long()
        for layer in self.cache.layers:
            if getattr(layer, "keys", None) is None:
                continue
            index = source[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
            layer.keys, layer.values = layer.keys.gather(2, index), layer.values.gather(2, index)  # both read first
        self.mask = new_mask

    def _crop(self) -> None:
        """Drop trailing slots no sequence keeps; pack the cache when holes dominate."""
        used = self.mask.any(dim=0).nonzero()
        keep = int(used.max()) + 1 if used.numel() else 0
        if keep < self.slots:
            self.cache.crop(keep - self.slots)  # a negative argument removes that many trailing slots
            self.mask = self.mask[:, :keep]
        if self.holes() > self.compact_holes * self._rows_in_use() * self.slots:
            self.compact()
