"""Several sequences decoded together on the torch backend (``specplan run --batch B``, ``specplan serve
--parallel N``): the torch side of runtime/batcher.py.

Each sequence's engine runs in a thread of its own, unchanged (its drafter, tree, fallback guard, chain
growth and sampling stay per sequence), as on llama.cpp (runtime/llama_cpp_shared.py). What the
sequences share is each network's forward: a :class:`SharedBatch` holds one network and one ragged
batched cache (runtime/batched_kv.py ``BatchedKV``) with a row per slot, and a :class:`TorchSlotSession`
is the session contract (runtime/backend.py) over one row. A slot session never runs the network
itself: its extend hands its tokens (a chain, or a draft tree's nodes) to the :class:`~specplan.runtime.batcher.Batcher`
and waits; the batcher's step runs one forward over the rows of the slots that have something to decode
(the others are left out of it: a slot with nothing to decode costs no work), each row at its own logical
positions and attending only to its own kept tokens (``BatchedKV``: padding and rejected tokens are holes in
the mask). Keep, trim and reset edit the slot's row of the mask under the batcher's ``cache_lock``.

Numerics: a row's logits are those of the sequence alone up to float summation order (the batched
matrix products), so greedy output is the target's up to near-ties in float16 and bfloat16, and the same
in float32 within 1e-4 (tests/runtime/test_session_conformance_multi.py). Draft heads read the target's
hidden states, which a slot session does not return; a plan with one runs a sequence at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from specplan.core.errors import SpecplanError
from specplan.runtime.backend import Session
from specplan.runtime.batched_kv import BatchedKV
from specplan.runtime.batcher import Batcher
from specplan.runtime.timing import now
from specplan.runtime.tree import DraftTree

PAD = 0  # the token a short row's padding feeds (masked: never attended)


@dataclass
class Extend:
    """One slot's extend as the batcher decodes it; ``rows``: its logits [len(tokens), vocab] float32, or with
    ``best`` each row's argmax (a greedy round nobody else watches: ``Session.extend_best_tokens``)."""

    slot: int
    tokens: list[int]
    tree: DraftTree | None
    rows: torch.Tensor | list[int] | None = None
    error: BaseException | None = None
    read: bool = True  # False: an advance, whose rows nobody reads
    best: bool = False  # only each row's argmax is read: taken over the whole batch at once, no float copy
    done: bool = False
    thread: int = 0  # the sequence's thread that waits on it


class SharedBatch:
    """One network and its batched cache of ``slots`` rows (:class:`BatchedKV`); slot sessions take rows."""

    def __init__(self, network: torch.nn.Module, slots: int, batcher: Batcher):
        self.network, self.slots, self.batcher = network, slots, batcher
        self.device = next(network.parameters()).device
        self.kv = BatchedKV(network, self.device, pad_id=PAD)
        self.kv.mask = torch.zeros((slots, 0), dtype=torch.long, device=self.device)
        self._free = list(range(slots))
        self.log: list[tuple[float, int, int]] | None = None  # set to a list: (end time, width, rows) of every forward

    def session(self) -> "TorchSlotSession":
        """A session over a free row; SpecplanError when every row is taken."""
        if not self._free:
            raise SpecplanError(f"all {self.slots} slots of a network are taken: a plan that opens this model more than "
                                "once per sequence cannot decode sequences together; run one at a time")
        return TorchSlotSession(self, self._free.pop(0))

    def release(self, slot: int) -> None:
        """Drop ``slot``'s tokens and let another session take its row."""
        self.trim(slot, 0)
        self._free.append(slot)

    def decode_together(self, extends: list[Extend]) -> None:
        """One forward over the rows of the slots that have an extend, the others left out (their rows cost no
        work); each extend gets its rows. An error is handed to every extend, the cache as before."""
        extends = sorted(extends, key=lambda extend: extend.slot)
        rows, trees = [extend.tokens for extend in extends], [extend.tree for extend in extends]
        if all(tree is None for tree in trees):
            trees = None
        else:  # a chain beside trees goes in as the tree that is a chain
            trees = [tree or DraftTree.chain(torch.tensor(row)) for row, tree in zip(rows, trees)]
        mask = self.kv.mask.clone()
        read = any(extend.read for extend in extends)  # else the LM head runs for each row's last token only
        try:
            logits = self.kv.forward(rows, trees, [extend.slot for extend in extends], logits_to_keep=0 if read else 1)
        except Exception as error:  # handed to the sequences' threads, which raise it
            self.kv.restore(mask)
            for extend in extends:
                extend.error = error
            return
        if self.log is not None:
            self.log.append((now(self.device), self.kv.last_width, len(extends)))
        best = logits.argmax(dim=-1).tolist() if any(extend.best for extend in extends) else None  # [rows][width]
        for number, extend in enumerate(extends):
            if extend.best:
                extend.rows = best[number][:len(extend.tokens)]  # the argmax of bfloat16 rows: float32's, exactly
            else:
                extend.rows = logits[number, :len(extend.tokens)].float() if extend.read else None

    def keep(self, slot: int, past: int, nodes: Sequence[int]) -> None:
        """Row ``slot`` keeps its first ``past`` tokens, then only ``nodes`` of what follows."""
        with self.batcher.cache_lock:
            kept = self.kv.mask[slot].nonzero().flatten()
            dropped = torch.ones(len(kept) - past, dtype=torch.bool, device=kept.device)
            dropped[list(nodes)] = False
            self.kv.drop([slot], kept[past:][dropped])

    def trim(self, slot: int, length: int) -> None:
        """Row ``slot`` keeps only its first ``length`` tokens."""
        with self.batcher.cache_lock:
            self.kv.drop([slot], self.kv.mask[slot].nonzero().flatten()[length:])


class TorchSlotSession(Session):
    """The session contract over one row of a :class:`SharedBatch` (module docstring); closing it frees the row."""

    backend = "torch"

    def __init__(self, shared: SharedBatch, slot: int):
        self._shared, self.slot = shared, slot
        self.model = shared.network
        self.device = shared.device
        self.compiled = False
        self.cached: list[int] = []
        self.forwards = 0
        self.forward_seconds = 0.0

    def extend(self, tokens: Sequence[int], tree: DraftTree | None = None) -> torch.Tensor:
        return self._append(Extend(self.slot, [int(token) for token in tokens], tree))

    def extend_best_tokens(self, tokens: Sequence[int], tree: DraftTree | None = None) -> list[int]:
        """Each row's argmax (the first maximum on ties, as ``torch.argmax``), taken in the batch's forward for
        every such extend at once instead of a float32 copy of each row."""
        return self._append(Extend(self.slot, [int(token) for token in tokens], tree, best=True))

    def advance(self, tokens: Sequence[int]) -> None:
        """Append ``tokens`` as :meth:`extend` does, its rows unread: a step of advances only runs the LM head
        for each row's last token (runtime/session.py ``ModelSession.advance``)."""
        self._append(Extend(self.slot, [int(token) for token in tokens], None, read=False))

    def _append(self, extend: Extend) -> torch.Tensor | None:
        start = now(self.device)
        self._shared.batcher.submit(self._shared, extend)
        if extend.error is not None:
            raise extend.error
        self.cached.extend(extend.tokens)
        self.forwards += 1
        self.forward_seconds += now(self.device) - start
        return extend.rows

    def keep(self, past_length: int, nodes: Sequence[int]) -> None:
        new_tokens = self.cached[past_length:]
        if list(nodes) != list(range(len(new_tokens))):  # a chain kept whole (every plain round) drops nothing
            self._shared.keep(self.slot, past_length, nodes)
        self.cached[past_length:] = [new_tokens[node] for node in nodes]  # the tail only, in place

    def trim(self, length: int) -> None:
        if length < len(self.cached):
            self._shared.trim(self.slot, length)
            del self.cached[length:]

    def reset(self) -> None:
        self.trim(0)

    def close(self) -> None:
        """Free this session's row (safe to call twice)."""
        if self._shared is not None:
            self.cached = []
            self._shared.release(self.slot)
            self._shared = None


class SharedNetworks:
    """Where the sessions of ``slots`` sequences decoded together come from on torch: the first session
    of a network makes its :class:`SharedBatch`, each later one takes a free row of it. Drafter networks
    are loaded once for every slot (:meth:`network`)."""

    def __init__(self, slots: int):
        if slots < 1:
            raise SpecplanError(f"{slots} sequences at once: pass at least 1")
        self.slots = slots
        self.batcher = Batcher()
        self._batches: dict[int, SharedBatch] = {}
        self._networks: dict[str, torch.nn.Module] = {}
        self._lock = threading.Lock()

    def session(self, network: torch.nn.Module) -> TorchSlotSession:
        return self.shared(network).session()

    def shared(self, network: torch.nn.Module) -> SharedBatch:
        """The batched cache of ``network`` (made on first use)."""
        with self._lock:
            if id(network) not in self._batches:
                self._batches[id(network)] = SharedBatch(network, self.slots, self.batcher)
            return self._batches[id(network)]

    def network(self, key: str, load: Callable[[], torch.nn.Module]) -> torch.nn.Module:
        """The network ``key`` names, loaded by ``load`` the first time (one copy for every slot)."""
        with self._lock:
            if key not in self._networks:
                self._networks[key] = load()
            return self._networks[key]

    def close(self) -> None:
        self._batches.clear()
        self._networks.clear()
