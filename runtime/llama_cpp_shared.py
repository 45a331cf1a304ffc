"""Several requests decoded together in one llama.cpp context (``specplan serve --parallel N``).

Each request's engine runs in a thread of its own, unchanged: its fallback guard, chain growth,
prediction and sampling stay per request. What the requests share is each model's forward. A
:class:`SharedContext` holds one GGUF model and one context whose unified KV cache has room for
``slots`` sessions; a :class:`SlotSession` is a :class:`~specplan.runtime.llama_cpp_session.LlamaCppSession`
over that context that owns a block of sequence ids (its committed text, then its tree paths) and
``n_ctx`` cells of the cache. A slot session never calls ``llama_decode`` itself: its extend hands its
tokens, positions, sequence ids and the rows it reads to the :class:`Batcher` and waits. The
batcher's thread decodes once every request's thread waits on a decode: all their tokens in one
``llama_decode`` per model (in BATCH-token pieces), each session's rows handed back to it. A round
of N requests then costs T(their tokens together) instead of N forwards, as a batched step does in
vLLM v1's scheduler; here the step is one round of every request in flight. The slots share one
cache, and llama-cpp-python releases the GIL in every call, so every decode and every cache edit
(a slot's keep, trim, reset) holds the batcher's ``cache_lock`` (:class:`LockedCache`).

Numerics: the requests' cells interleave in the cache, and a freed cell goes to whichever sequence
decodes next, so a slot session's cells do not stay in position order (no junk sequence, no
compaction), and where they sit changes the order in which llama.cpp's kernels sum over them.
With SmolLM2 that moved logits as much as llama.cpp's fast numerics do anyway (up to 1.0 on some
vocabulary entries; docs/backends.md's table): a slot's cells placed after another slot's 38,
whatever those held. So only fast numerics run here: lossless up to near-ties, as docs/backends.md
("What lossless means here") defines it. One thread decodes, the batcher's: llama.cpp's OpenMP
team belongs to the thread that calls it (serve/worker.py).

Wide verifies (runtime/llama_cpp_wide.py): where the plan verifies ``wide_from`` tokens or more at once,
the shared context has a second one over the GGUF loaded without repacking (``SharedContext.wide``), with
the same slots. A slot session decodes its long chain extends there, its committed sequence copied
between the two contexts when one lags (:meth:`SlotSession._copy_state`), as a session alone does; the batcher
decodes each context's waiting extends together. Without it every slot verified its chains of 64 on
repacked weights: the edit plan served 38.8 tok/s in a slot against 47.9 alone, and 37.6 alone without
its wide copy (``measurements/batched_turns.py``; docs/results.md, "Serving over HTTP").
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specplan.core.errors import ModelError, SpecplanError
from specplan.runtime.llama_cpp_session import (BATCH, LlamaCppSession, _llama_cpp, _prepare_backend, context_params,
                                                fill_batch, load_model, logits_view, repacks_weights)
from specplan.runtime.batcher import Batcher
from specplan.runtime.llama_cpp_wide import WideView, copy_sequence

LLAMA_MAX_SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ: sequence ids one context may hold


@dataclass
class Submission:
    """One session's extend as the batcher decodes it; ``pieces``: what ``read`` took of its rows."""

    tokens: list[int]
    positions: list[int]
    sequence_ids: list[list[int]]
    read: object  # CopyRows, BestOfRows, or None (no rows)
    pieces: list = field(default_factory=list)
    status: int = 0  # llama_decode's status where it failed, else 0
    failed_at: int = 0  # the first of this extend's tokens in the piece that failed
    error: BaseException | None = None
    done: bool = False
    thread: int = 0  # the request's thread that waits on it


def slot_tree_paths(slots: int) -> int:
    """Draft-tree paths one of ``slots`` slots holds: its ``LLAMA_MAX_SEQUENCES // slots`` sequence ids,
    less the one for its committed tokens."""
    return LLAMA_MAX_SEQUENCES // slots - 1


class SharedContext:
    """One GGUF model in one llama.cpp context whose unified cache ``slots`` sessions share, each
    with ``n_ctx`` cells and ``LLAMA_MAX_SEQUENCES // slots`` sequence ids (fast numerics)."""

    def __init__(self, model_path: str | Path, slots: int, n_ctx: int, threads: int, batcher: Batcher,
                 verbose: bool = False, flash_off: bool = False, wide_from: int = 0, repack: bool | None = None):
        self.llama = _llama_cpp()
        _prepare_backend(self.llama, verbose)
        self.ids_per_slot = LLAMA_MAX_SEQUENCES // slots
        if slots < 1 or self.ids_per_slot < 2:
            raise SpecplanError(f"{slots} requests at once: pass 1 to {LLAMA_MAX_SEQUENCES // 2}")
        self.model_path, self.n_ctx, self.threads, self.batcher = Path(model_path), n_ctx, threads, batcher
        self.flash_off = flash_off
        self.model = self.context = self.batch = None
        repack = repacks_weights(False) if repack is None else repack  # on AMX without it (docs/backends.md, "AMX")
        self.model = load_model(self.llama, self.model_path, exact=False, repack=repack)
        params = context_params(self.llama, n_ctx * slots, self.ids_per_slot * slots, threads, False, flash_off)
        self.context = self.llama.llama_init_from_model(self.model, params)
        if not self.context:
            self.close()
            raise ModelError(f"llama.cpp could not create a context of {n_ctx * slots} cells for {slots} requests; "
                             "serve fewer at once (--parallel)")
        self.memory = self.llama.llama_get_memory(self.context)
        self.batch = self.llama.llama_batch_init(BATCH, 0, self.ids_per_slot)
        self.vocab = self.llama.llama_model_get_vocab(self.model)
        self.vocab_size = self.llama.llama_vocab_n_tokens(self.vocab)
        self.slots = slots
        self._free = list(range(slots))
        self._views: dict[tuple[int, int], np.ndarray] = {}
        # chain extends of wide_from tokens or more decode in a context over the unrepacked weights (module docstring)
        self.wide_from, self.wide = (wide_from if repack else 0), None  # unrepacked weights already verify wide
        if self.wide_from > 0:
            try:
                self.wide = SharedContext(model_path, slots, n_ctx, threads, batcher, verbose, flash_off, repack=False)
            except Exception:
                self.close()
                raise

    def session(self) -> "SlotSession":
        """A session over a free slot; SpecplanError when every slot is taken."""
        if not self._free:
            raise SpecplanError(f"all {self.slots} slots of {self.model_path.name} are taken: a plan that opens this "
                                "model more than once per request cannot serve requests in parallel; use --parallel 1")
        return SlotSession(self, self._free.pop(0))

    def release(self, slot: int) -> None:
        """Free the cells of ``slot``'s sequences and let another session take it."""
        with self.batcher.cache_lock:
            for shared in (self, self.wide) if self.wide is not None else (self,):
                if shared.memory is not None:
                    for sequence in range(slot * self.ids_per_slot, (slot + 1) * self.ids_per_slot):
                        self.llama.llama_memory_seq_rm(shared.memory, sequence, -1, -1)
            self._free.append(slot)

    def decode_together(self, submissions: list[Submission]) -> None:
        """Decode the submissions' tokens in order, BATCH per llama_decode, and hand each its rows."""
        queue = deque((submission, 0) for submission in submissions if submission.tokens)
        try:
            while queue:
                segments, room = [], BATCH
                while queue and room:
                    submission, first = queue.popleft()
                    count = min(room, len(submission.tokens) - first)
                    segments.append((submission, first, count))
                    room -= count
                    if first + count < len(submission.tokens):
                        queue.appendleft((submission, first + count))
                if not self._decode_segments(segments):
                    for submission, first in queue:  # not decoded: their sessions undo what they hold
                        if not submission.status:
                            submission.status, submission.failed_at = 1, first
                    return
        except Exception as error:  # handed to the sessions' threads, which raise it
            for submission in submissions:
                submission.error = submission.error or error

    def _decode_segments(self, segments: list[tuple[Submission, int, int]]) -> bool:
        """One llama_decode of the segments (submission, first token, count); False when it failed."""
        index = 0
        for submission, first, count in segments:
            last = first + count
            index = fill_batch(self.batch, index, submission.tokens[first:last], submission.positions[first:last],
                               submission.sequence_ids[first:last], submission.read is not None)
        self.batch.n_tokens = index
        status = self.llama.llama_decode(self.context, self.batch)
        if status != 0:
            for submission, first, _count in segments:
                if not submission.status:
                    submission.status, submission.failed_at = status, first
            return False
        read_rows = sum(count for submission, _first, count in segments if submission.read is not None)
        view = logits_view(self.llama, self.context, read_rows, self.vocab_size, self._views) if read_rows else None
        row = 0
        for submission, _first, count in segments:
            if submission.read is not None:
                submission.pieces.append(submission.read.take(view[row:row + count]))
                row += count
        return True

    def close(self) -> None:
        """Free the batch, the context and the model, and the wide copy's (safe to call twice)."""
        if getattr(self, "wide", None) is not None:
            self.wide.close()
            self.wide = None
        if self.batch is not None:
            self.llama.llama_batch_free(self.batch)
            self.batch = None
        if self.context:
            self.llama.llama_free(self.context)
        self.context = self.memory = None
        if self.model:
            self.llama.llama_model_free(self.model)
        self.model = None


class LockedCache:
    """llama-cpp-python's module as a slot session calls it: every ``llama_memory_*`` call (keep, trim,
    reset: cache edits) and ``llama_state_seq_*`` call (a sequence copied to or from the wide context)
    holds the batcher's cache lock, so no two slots edit the shared cache at once and none edits it
    during a decode (a request may start while the others' round decodes)."""

    def __init__(self, llama, lock: threading.Lock):
        self._llama, self._lock = llama, lock

    def __getattr__(self, name: str):
        value = getattr(self._llama, name)
        if not name.startswith(("llama_memory_", "llama_state_seq_")):
            return value

        def locked(*args):
            with self._lock:
                return value(*args)

        return locked


class SlotSession(LlamaCppSession):
    """A session over one slot of a :class:`SharedContext`: its sequence ids start at ``slot *
    ids_per_slot``; its extends decode through the shared context's batcher; closing it frees its
    cells and the slot, not the model."""

    def __init__(self, shared: SharedContext, slot: int):
        self._llama = LockedCache(shared.llama, shared.batcher.cache_lock)
        self._shared, self.slot = shared, slot
        self.model_path = shared.model_path
        self.max_tree_paths = slot_tree_paths(shared.slots)
        self.committed = slot * shared.ids_per_slot
        self.junk_sequence = -1  # never used: the cells need not stay in order (module docstring)
        self.keeps_order = False
        self.threads = shared.threads
        self.exact = False
        self.flash_off = shared.flash_off
        self.wide_from = shared.wide_from
        self._model, self._context, self._memory = shared.model, shared.context, shared.memory
        self._batch = None
        wide = shared.wide
        self._wide = WideView(self._llama, wide.context, wide.memory, self.committed) if wide is not None else None
        self._vocab, self._vocab_size = shared.vocab, shared.vocab_size
        self.n_ctx = shared.n_ctx
        self._start_bookkeeping()

    def _decode(self, context, tokens, positions, sequence_ids, read=None):
        """The extend's decode, together with the other requests' in the same context (:class:`Batcher`)."""
        submission = Submission(tokens, positions, sequence_ids, read)
        shared = self._shared.wide if self._wide is not None and context is self._wide.context else self._shared
        self._shared.batcher.submit(shared, submission)
        if submission.error is not None:
            self._undo_extend()
            raise submission.error
        if submission.status:
            self._fail_decode(submission.status, submission.failed_at, context)
        return None if read is None else read.join(submission.pieces, self._vocab_size)

    def _undo_extend(self) -> None:
        """Free what an extend that raised left: its path sequences and cells past the cached tokens."""
        self._drop_path_sequences()
        self._llama.llama_memory_seq_rm(self._memory, self.committed, len(self.cached), -1)
        if self._wide is not None:
            self._llama.llama_memory_seq_rm(self._wide.memory, self.committed, len(self.cached), -1)

    def _copy_state(self, source, destination) -> None:
        """This slot's committed sequence alone, copied between the shared context and its wide copy: the
        other slots' cells stay (a slot never compacts: its cells need not stay in order)."""
        copy_sequence(self._llama, source, destination, self._state_buffer, self.committed)

    def _clear_cache(self) -> None:
        """Free this slot's cells only (the other slots' requests go on)."""
        self._drop_path_sequences()
        self._llama.llama_memory_seq_rm(self._memory, self.committed, -1, -1)

    def close(self) -> None:
        """Free this slot's cells and the slot (safe to call twice); the shared model stays."""
        if self._context is not None:
            self._shared.release(self.slot)
        self._context = self._memory = self._model = None


class SharedModels:
    """Where the sessions of a server decoding ``slots`` requests together come from: the first
    session of a GGUF file loads it into a :class:`SharedContext` of ``slots`` slots, each later one
    takes a free slot of it. Call it as ``sessions(gguf, exact)`` (``LoadedModel.sessions``)."""

    def __init__(self, slots: int, n_ctx: int, threads: int = 0):
        import os

        self.slots, self.n_ctx, self.threads = slots, n_ctx, threads or os.cpu_count() or 1
        self.batcher = Batcher()
        self._contexts: dict[Path, SharedContext] = {}

    def __call__(self, gguf: str | Path, exact: bool, flash_off: bool = False, wide_from: int = 0) -> SlotSession:
        if exact:
            raise SpecplanError("several requests decode together only with fast numerics (their rows are batched); "
                                "this plan's profile runs exact numerics: re-profile with --numerics fast, or serve "
                                "one request at a time (--parallel 1)")
        path = Path(gguf).resolve()
        if path not in self._contexts:
            self._contexts[path] = SharedContext(path, self.slots, self.n_ctx, self.threads, self.batcher,
                                                 flash_off=flash_off, wide_from=wide_from)
        return self._contexts[path].session()

    def close(self) -> None:
        for shared in self._contexts.values():
            shared.close()
        self._contexts.clear()

