"""The llama.cpp backend of the session contract (:class:`~specplan.runtime.backend.Session`),
on llama-cpp-python's low-level C API (docs/backends.md).

One llama.cpp context holds one unified KV cache (``kv_unified``) shared by ``max_tree_paths + 2``
sequence ids. Sequence 0 is the committed text: ``cached`` lists its tokens, at positions
``0 .. len(cached) - 1``. A chain ``extend`` appends to sequence 0. A tree ``extend`` gives each
root-to-leaf path its own sequence ``1 .. paths``: the committed prefix is copied to it
(``llama_memory_seq_cp``, which in a unified cache only tags the prefix's cells with the new id),
and every node is decoded once, tagged with the ids of all paths through it, at position
``len(cached) + depth``. llama.cpp's attention mask lets a cell attend to the cells that share one
of its sequence ids at earlier or equal positions: exactly the node's ancestors, itself and the
prefix (tree attention). ``keep`` then tags the accepted path's cells with sequence 0 and removes
every path sequence, which frees the cells of the rejected branches.

Cell order: llama.cpp's attention sums a query's cells in the order they sit in memory, so for
the logits to equal those of a chain (bit for bit, docs/backends.md) sequence 0's cells must sit
in position order. A freed cell below a kept one would be reused by a later token, so ``keep``
tags the rejected cells that lie below the last kept cell with a junk sequence (id
``max_tree_paths + 1``, never attended to) instead of freeing them, and only frees those above.
When junk would crowd out an extend, sequence 0 is compacted: saved, the cache cleared, and
restored into consecutive cells (``llama_state_seq_get_data`` / ``set_data``, an exact copy).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from specplan.core.errors import BackendMissingError, ModelError, SpecplanError
from specplan.core.parents import check_parents, node_depths
from specplan.runtime.backend import Session
from specplan.runtime.llama_cpp_repack import repack_overrides
from specplan.runtime.llama_cpp_wide import StateBuffer, WideContext, copy_committed

COMMITTED = 0  # the sequence id of the committed text; path p of a tree extend has id p + 1
BATCH = 512  # tokens per llama_decode (n_batch = n_ubatch); a longer extend is split into several


def _llama_cpp():
    """The ``llama_cpp`` module; a one-line SpecplanError when llama-cpp-python is not installed."""
    try:
        import llama_cpp
    except ImportError:
        raise BackendMissingError("the llama.cpp backend needs llama-cpp-python; "
                                  "install it with `pip install llama-cpp-python`") from None
    return llama_cpp


def llama_cpp_version() -> str:
    """The installed llama-cpp-python version; SpecplanError (one line) when it is not installed."""
    try:
        import llama_cpp
    except ImportError:
        raise SpecplanError("--engine llama.cpp measures with llama-cpp-python, which is not installed; "
                            "pip install llama-cpp-python") from None
    return str(getattr(llama_cpp, "__version__", "unknown"))


_SILENT_LOG = None  # the no-op log callback; kept here so ctypes never frees it while llama.cpp holds it
_BACKEND_READY = False


def _prepare_backend(llama_cpp, verbose: bool) -> None:
    """Initialise llama.cpp's backend once per process and, unless ``verbose``, silence its log."""
    global _SILENT_LOG, _BACKEND_READY
    if not verbose and _SILENT_LOG is None:
        _SILENT_LOG = llama_cpp.llama_log_callback(lambda level, text, user_data: None)
        llama_cpp.llama_log_set(_SILENT_LOG, ctypes.c_void_p(0))
    if not _BACKEND_READY:
        llama_cpp.llama_backend_init()
        _BACKEND_READY = True


def _has_amx(llama_cpp) -> bool:
    """Whether this llama.cpp build uses the CPU's AMX tiles (docs/backends.md, "AMX")."""
    return "AMX_INT8 = 1" in llama_cpp.llama_print_system_info().decode(errors="replace")


def repacks_weights(exact: bool) -> bool:
    """Whether a session with these numerics repacks the weights for this CPU (llama.cpp's "extra buffer
    types", on by default in llama.cpp and llama-server): not when ``exact`` (batch invariance was measured
    without it). On a CPU with AMX, whose AMX repacking crashes in llama_decode, through the CPU_REPACK
    buffer type alone (runtime/llama_cpp_repack.py; docs/backends.md, "AMX")."""
    return not exact


def repacking_crashes() -> bool:
    """Whether llama.cpp's own weight repacking crashes on this CPU (a build that uses its AMX tiles):
    llama-server then runs only with ``--no-repack`` (docs/backends.md, "AMX")."""
    return _has_amx(_llama_cpp())


def engine_repacks(exact: bool) -> bool:
    """Whether llama.cpp's own engines (llama-server, llama-cpp-python's ``Llama``) run repacked weights
    where a session with these numerics does: not where their repacking crashes, and ``--no-repack`` is
    how they run (no flag of theirs repacks without AMX)."""
    return repacks_weights(exact) and not repacking_crashes()


def load_model(llama_cpp, model_path: str | Path, exact: bool = True, repack: bool | None = None,
               without_amx: bool | None = None):
    """Load the GGUF file at ``model_path`` on the CPU; ModelError (one line) when it is missing or unloadable.

    Weight repacking as ``repack`` says, else as :func:`repacks_weights` says; ``without_amx`` (None: on a CPU
    with AMX) through the CPU_REPACK buffer type alone (runtime/llama_cpp_repack.py)."""
    path = Path(model_path)
    if not path.is_file():
        raise ModelError(f"GGUF file {path} does not exist; pass the path of an existing .gguf file")
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    params.use_extra_bufts = repacks_weights(exact) if repack is None else repack
    overrides = None  # kept referenced until the model is loaded
    if params.use_extra_bufts and (_has_amx(llama_cpp) if without_amx is None else without_amx):
        params.use_extra_bufts = False
        overrides = repack_overrides(path)
        params.tensor_buft_overrides = ctypes.cast(overrides, ctypes.c_void_p) if overrides is not None else None
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise ModelError(f"llama.cpp could not load {path} (not a GGUF model this llama.cpp supports); "
                         "pass a valid .gguf file, or set verbose=True to see llama.cpp's reason")
    return model


def context_params(llama_cpp, n_ctx: int, sequences: int, threads: int, exact: bool, flash_off: bool = False):
    """llama.cpp context parameters: BATCH-token decodes with a logits row per token, one unified
    KV cache for ``sequences`` sequence ids.

    ``exact``: flash attention on and one-token decodes on one thread (batches on ``threads``).
    Then a decode of fewer than 64 tokens gives logits bit-identical to decoding its tokens one
    at a time (docs/backends.md, "What lossless means here"): below 64 query rows the CPU flash
    attention runs the same per-row kernel for any batch, and a one-token decode on several
    threads would instead split the keys between threads once the cache view reaches 512 cells.
    ``flash_off`` (fast numerics only): flash attention off, where the profile measured one-token
    decodes faster without it (profiler/engine_floor.py); else llama.cpp chooses.
    """
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = params.n_ubatch = BATCH
    params.n_seq_max = sequences
    params.n_outputs_max = params.n_outputs_max_per_seq = max(BATCH, sequences)
    params.kv_unified = True
    params.n_threads_batch = threads
    params.n_threads = 1 if exact else threads
    params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if exact else llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
    if flash_off and not exact:
        params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    return params


def path_sequences(parents: Sequence[int]) -> list[list[int]]:
    """The root-to-leaf paths of a tree (a leaf is a node with no children), in leaf order.

    >>> path_sequences((-1, 0, 0, 1))
    [[0, 2], [0, 1, 3]]
    """
    has_child = [False] * len(parents)
    for parent in parents[1:]:
        has_child[parent] = True
    paths = []
    for leaf in (node for node in range(len(parents)) if not has_child[node]):
        path, node = [], leaf
        while node >= 0:
            path.append(node)
            node = parents[node]
        paths.append(path[::-1])
    return paths


@dataclass(frozen=True)
class TreeLayout:
    """A tree extend's shape as the cache holds it: every node's depth, the root-to-leaf paths
    (path p is sequence p + 1) and, for every node, a path through it."""

    depths: list[int]
    paths: list[list[int]]
    path_of_node: list[int]

    @classmethod
    def of(cls, parents: Sequence[int]) -> "TreeLayout":
        """The layout of the tree with parent array ``parents``."""
        paths = path_sequences(parents)
        path_of_node = [0] * len(parents)
        for index in reversed(range(len(paths))):
            for node in paths[index]:
                path_of_node[node] = index
        return cls(node_depths(parents), paths, path_of_node)

    def path_starting_with(self, nodes: list[int]) -> int:
        """Index of a path that begins with ``nodes``; ValueError when ``nodes`` is not root-to-leaf."""
        for index, path in enumerate(self.paths):
            if path[:len(nodes)] == nodes:
                return index
        raise ValueError(f"nodes {nodes} are not a root-to-leaf path of the last tree extend")


def node_sequence_ids(parents: Sequence[int], paths: list[list[int]], committed: int = COMMITTED) -> list[list[int]]:
    """For every node, the sequence ids (path p has id ``committed + 1 + p``) of the paths through it."""
    ids: list[list[int]] = [[] for _ in parents]
    for index, path in enumerate(paths):
        for node in path:
            ids[node].append(committed + 1 + index)
    return ids


def fill_batch(batch, start: int, tokens: Sequence[int], positions: Sequence[int],
               sequence_ids: Sequence[list[int]], logits: bool) -> int:
    """Write tokens, their positions, sequence ids and logit flags into ``batch`` from row ``start``;
    the row after the last written."""
    index = start
    for token, position, ids in zip(tokens, positions, sequence_ids):
        batch.token[index] = token
        batch.pos[index] = position
        batch.n_seq_id[index] = len(ids)
        for slot, sequence in enumerate(ids):
            batch.seq_id[index][slot] = sequence
        batch.logits[index] = 1 if logits else 0
        index += 1
    return index


def logits_view(llama, context, rows: int, vocab_size: int, views: dict) -> np.ndarray:
    """llama.cpp's logits buffer of ``context`` after a decode, as a float32 array [rows, vocab] (no
    copy). Views are cached in ``views`` by the buffer's address and row count: making one through
    ctypes costs more than reading a row."""
    pointer = llama.llama_get_logits(context)
    key = (ctypes.addressof(pointer.contents), rows)
    view = views.get(key)
    if view is None:
        view = views[key] = np.ctypeslib.as_array(pointer, shape=(rows, vocab_size))
    return view


class CopyRows:
    """Reads a decode's logits rows as a float32 tensor [n, vocab]: one numpy copy out of
    llama.cpp's buffer, handed to torch as it is."""

    @staticmethod
    def take(view: np.ndarray) -> np.ndarray:
        return view.copy()

    @staticmethod
    def join(pieces: list[np.ndarray], vocab: int) -> torch.Tensor:
        if len(pieces) == 1:
            return torch.from_numpy(pieces[0])
        return torch.from_numpy(np.concatenate(pieces) if pieces else np.empty((0, vocab), np.float32))


class BestOfRows:
    """Reads only the argmax of each logits row [n] (the first maximum on ties, as ``torch.argmax``
    and runtime/verify.py ``best_tokens``), in place in llama.cpp's buffer."""

    @staticmethod
    def take(view: np.ndarray) -> list[int]:
        return view.argmax(axis=-1).tolist()

    @staticmethod
    def join(pieces: list[list[int]], vocab: int) -> list[int]:
        return pieces[0] if len(pieces) == 1 else [token for piece in pieces for token in piece]


class LlamaCppSession(Session):
    """A GGUF model in a llama.cpp context, its KV cache and the token ids sequence 0 holds.

    ``n_ctx``: cache cells (the committed text plus one extend's nodes must fit); ``threads``:
    llama.cpp's threads (default ``os.cpu_count()``); ``max_tree_paths``: the most root-to-leaf
    paths a tree extend may have (one sequence id each); ``verbose``: keep llama.cpp's log;
    ``exact``: settings under which an extend of fewer than 64 tokens gives logits bit-identical
    to one-token extends (see :func:`context_params`; off: faster one-token decodes on many cores).
    ``wide_from``: chain extends of this many tokens or more run on a second copy of the weights
    that llama.cpp does not repack (:mod:`~specplan.runtime.llama_cpp_wide`; 0: never, and ignored
    where the session does not repack: exact numerics, AMX; it may be changed between extends).
    Use it as a context manager or call :meth:`close` to free the models and contexts.
    """

    backend = "llama.cpp"

    def __init__(self, model_path: str | Path, n_ctx: int = 4096, threads: int | None = None,
                 max_tree_paths: int = 64, verbose: bool = False, exact: bool = True, wide_from: int = 0,
                 flash_off: bool = False):
        """Load ``model_path`` and create its context (the arguments are in the class docstring)."""
        self._llama = _llama_cpp()
        _prepare_backend(self._llama, verbose)
        if max_tree_paths < 1 or n_ctx < 1:
            raise SpecplanError(f"n_ctx ({n_ctx}) and max_tree_paths ({max_tree_paths}) must be at least 1")
        self.model_path = Path(model_path)
        self.max_tree_paths = max_tree_paths
        self.committed = COMMITTED  # this session's sequence ids: committed, committed + 1 + path
        self.junk_sequence = max_tree_paths + 1
        self.keeps_order = True  # sequence 0's cells stay in position order (junk, compaction)
        self.threads = threads or os.cpu_count() or 1
        self.exact = exact
        self.flash_off = flash_off and not exact
        self._model = self._context = self._batch = self._wide = None
        self._model = load_model(self._llama, self.model_path, exact)
        self._context = self._new_context(n_ctx)
        self._memory = self._llama.llama_get_memory(self._context)
        self._batch = self._llama.llama_batch_init(BATCH, 0, max_tree_paths + 2)
        self._vocab = self._llama.llama_model_get_vocab(self._model)
        self._vocab_size = self._llama.llama_vocab_n_tokens(self._vocab)
        self.n_ctx = self._llama.llama_n_ctx(self._context)
        self._start_bookkeeping()
        self.wide_from = wide_from if wide_from > 0 and repacks_weights(exact) else 0
        if self.wide_from:
            try:
                self._wide = WideContext(self._llama, load_model(self._llama, self.model_path, repack=False),
                                         context_params(self._llama, self.n_ctx, 1, self.threads, exact, self.flash_off))
            except ModelError:
                self.close()
                raise

    def _start_bookkeeping(self) -> None:
        """The state of an empty cache: nothing cached, counted, pending or held."""
        self.device = torch.device("cpu")
        self.cached: list[int] = []
        self.forwards = 0
        self.forward_seconds = 0.0
        self.compactions = 0  # times sequence 0 was compacted to make room
        self.copies = 0  # times sequence 0 was copied between this context and the wide one
        self._views: dict[tuple[int, int], np.ndarray] = {}  # see _logits_view
        self._tree: TreeLayout | None = None  # the last tree extend, until keep or trim
        self._junk = 0  # cells held by the junk sequence
        self._held = 0  # how many of ``cached`` this context's sequence 0 holds (fewer after a wide extend)
        self._state_buffer = StateBuffer()

    def _new_context(self, n_ctx: int):
        """A context with one unified cache for ``max_tree_paths + 2`` sequences (see :func:`context_params`)."""
        params = context_params(self._llama, n_ctx, self.max_tree_paths + 2, self.threads, self.exact, self.flash_off)
        context = self._llama.llama_init_from_model(self._model, params)
        if not context:
            self.close()
            raise ModelError(f"llama.cpp could not create a context of {n_ctx} cells with {self.max_tree_paths + 2} "
                             "sequences; lower n_ctx or max_tree_paths, or set verbose=True to see why")
        return context

    # ---- model facts -----------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """Rows of the output layer: the width of every logits row."""
        return self._vocab_size

    @property
    def eos_ids(self) -> frozenset[int]:
        """The vocab's end-of-sequence and end-of-turn tokens (those it defines)."""
        ids = (self._llama.llama_vocab_eos(self._vocab), self._llama.llama_vocab_eot(self._vocab))
        return frozenset(int(token) for token in ids if token >= 0)

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        """``text`` as this model's token ids (``add_special``: the vocab's BOS where it adds one)."""
        data = text.encode()
        capacity = len(data) + 8
        buffer = (self._llama.llama_token * capacity)()
        count = self._llama.llama_tokenize(self._vocab, data, len(data), buffer, capacity, add_special, False)
        if count < 0:  # the buffer was too small: -count is the size needed
            capacity = -count
            buffer = (self._llama.llama_token * capacity)()
            count = self._llama.llama_tokenize(self._vocab, data, len(data), buffer, capacity, add_special, False)
        return list(buffer[:count])

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of token ids ``ids`` (special tokens rendered as text)."""
        ids = [int(token) for token in ids]
        tokens = (self._llama.llama_token * max(1, len(ids)))(*ids)
        capacity = 8 * len(ids) + 16
        for _attempt in range(2):
            buffer = ctypes.create_string_buffer(capacity)
            count = self._llama.llama_detokenize(self._vocab, tokens, len(ids), buffer, capacity, False, True)
            if count >= 0:
                return buffer.raw[:count].decode(errors="replace")
            capacity = -count
        raise SpecplanError("llama.cpp could not detokenize the given ids")

    # ---- the contract ------------------------------------------------------------------------

    def reset(self) -> None:
        """Empty the cache: every sequence's cells are freed."""
        self._check_open()
        self._clear_cache()
        if self._wide is not None:
            self._wide.clear()
        self.cached = []
        self._tree = None
        self._junk = 0
        self._held = 0

    def trim(self, length: int) -> None:
        """Keep only the first ``length`` positions of sequence 0 and drop every path sequence
        (no-op when it holds no more and no tree is pending)."""
        self._check_open()
        if length <= 0:
            self.reset()
        elif length < len(self.cached) or self._tree is not None:
            self._drop_path_sequences()
            self._drop_committed_from(length)
            del self.cached[length:]

    def extend(self, tokens: Sequence[int], tree=None) -> torch.Tensor:
        """Decode ``tokens`` (a chain, or ``tree``'s nodes) over the cache; logits [len(tokens), vocab] float32."""
        return self._append(tokens, tree, read=CopyRows)

    def extend_best_tokens(self, tokens: Sequence[int], tree=None) -> list[int]:
        """Decode ``tokens`` (a chain, or ``tree``'s nodes); the argmax of each row, taken in
        llama.cpp's own logits buffer (no copy of the rows: a Qwen2.5 row is 600 KB, swept right
        after the decode)."""
        return self._append(tokens, tree, read=BestOfRows)

    def advance(self, tokens: Sequence[int]) -> None:
        """Decode ``tokens`` as a chain with no logits row requested: llama.cpp then skips the output
        layer (151,936 rows for Qwen2.5) and the last layer's feed-forward for them. The keys and
        values it stores are computed before that pruning, so the cache is the same as after
        :meth:`extend` (``test_advance_equals_extend``)."""
        self._append(tokens, None, read=None)

    def _append(self, tokens: Sequence[int], tree, read):
        """One decode of ``tokens`` appended to the cache (a chain, or ``tree``'s nodes); what
        ``read`` takes of the logits rows (:meth:`_decode`), None when it is None; counts the
        forward and its time."""
        self._check_open()
        start = time.perf_counter()
        tokens = [int(token) for token in tokens]
        past = len(self.cached)
        wide = self._wide is not None and tree is None and len(tokens) >= self.wide_from
        context = self._synced_context(wide, past)
        self._make_room(past, len(tokens), compact=not wide)
        if tree is None:
            self._drop_path_sequences()
            positions = [past + index for index in range(len(tokens))]
            sequence_ids = [[self.committed]] * len(tokens)
        else:
            positions, sequence_ids = self._prepare_tree(tree, past, len(tokens))
        rows = self._decode(context, tokens, positions, sequence_ids, read)
        self.cached.extend(tokens)
        if wide:
            self._wide.held = len(self.cached)
        else:
            self._held = len(self.cached)
        self.forwards += 1
        self.forward_seconds += time.perf_counter() - start
        return rows

    def keep(self, past_length: int, nodes: Sequence[int]) -> None:
        """After an extend that began at ``past_length``, keep only the root-to-leaf ``nodes`` of it,
        as sequence 0's cells at positions ``past_length ..`` (where they already sit)."""
        self._check_open()
        nodes = [int(node) for node in nodes]
        new_tokens = self.cached[past_length:]
        if self._tree is None:
            if nodes != list(range(len(nodes))):
                raise ValueError(f"nodes {nodes} are not a prefix of the last chain extend")
            if len(nodes) < len(new_tokens):  # a whole chain kept (every plain round) leaves nothing to drop
                self._drop_committed_from(past_length + len(nodes))
        else:
            self._keep_path(past_length, nodes)
        self.cached[past_length:] = [new_tokens[node] for node in nodes]  # the tail only: a copy of the whole text
        self._held = min(self._held, len(self.cached))                    # per round grew with the context

    # ---- helpers -------------------------------------------------------------------------------

    def _check_open(self) -> None:
        """One-line SpecplanError once :meth:`close` has freed the context."""
        if self._context is None:
            raise SpecplanError("this llama.cpp session is closed; create a new LlamaCppSession")

    def _keep_path(self, past: int, nodes: list[int]) -> None:
        """Tag the kept path's cells with sequence 0, the rejected cells below its last node with the
        junk sequence, and drop the path sequences (freeing the rejected cells above it)."""
        tree = self._tree
        if nodes:
            sequence = self.committed + 1 + tree.path_starting_with(nodes)
            self._llama.llama_memory_seq_cp(self._memory, sequence, self.committed, past, past + len(nodes))
        kept = set(nodes)
        below = nodes[-1] if nodes and self.keeps_order else 0
        for node in range(below):  # a tree's cells sit in node order
            if node not in kept:
                position = past + tree.depths[node]
                sequence = self.committed + 1 + tree.path_of_node[node]
                self._llama.llama_memory_seq_cp(self._memory, sequence, self.junk_sequence, position, position + 1)
                self._junk += 1
        self._drop_path_sequences()

    def copy_ms(self, repeats: int = 5) -> float:
        """Median ms of one copy of sequence 0 (as cached now) between the two contexts: each repeat
        copies it to the wide context, as a wide extend after plain rounds does, and back, as the
        next plain round does (the profiler adds both to the wide widths' T(n)); 0.0 without a
        wide context."""
        if self._wide is None or not self.cached:
            return 0.0
        self._drop_path_sequences()
        self._synced_context(False, len(self.cached))
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            self._copy(self._context, self._wide.context)
            self._copy(self._wide.context, self._context)
            times.append((time.perf_counter() - started) * 1e3 / 2)
        return float(np.median(times))

    def _drop_committed_from(self, length: int) -> None:
        """Free sequence 0's cells from position ``length`` on, in both contexts."""
        if length < self._held:
            self._llama.llama_memory_seq_rm(self._memory, self.committed, length, -1)
            self._held = length
        if self._wide is not None:
            self._wide.trim(length)

    def _synced_context(self, wide: bool, past: int):
        """The context the next extend decodes in (the wide one when ``wide``), holding all ``past``
        committed tokens: sequence 0 is copied to it from the other context when it lags."""
        if not wide:
            if self._held < past:
                self._copy(self._wide.context, self._context)
            return self._context
        if self._wide.held < past:
            self._drop_path_sequences()  # a pending tree's paths share sequence 0's cells
            self._copy(self._context, self._wide.context)
        return self._wide.context

    def _copy(self, source, destination) -> None:
        """Copy sequence 0 from ``source`` to ``destination`` (see :func:`copy_committed`; the same
        context: a compaction), which then holds what ``source`` held and, when it is this session's
        own context, no junk and no path sequence. On failure the session is reset and a one-line
        SpecplanError raised."""
        try:
            self._copy_state(source, destination)
        except SpecplanError as error:
            self.reset()
            raise SpecplanError(f"{error}; the session was reset") from None
        held = self._held if source is self._context else self._wide.held
        if destination is self._context:
            self._held, self._junk, self._tree = held, 0, None
        else:
            self._wide.held = held
        if source is not destination:
            self.copies += 1

    def _copy_state(self, source, destination) -> None:
        """The copy :meth:`_copy` makes: sequence 0 alone in ``destination`` (this session owns both contexts)."""
        copy_committed(self._llama, source, destination, self._state_buffer)

    def _make_room(self, past: int, count: int, compact: bool = True) -> None:
        """One-line SpecplanError when ``count`` more cells cannot fit beside ``past`` cached ones;
        with ``compact``, compact sequence 0 when they fit only without the junk cells."""
        if past + count > self.n_ctx:
            raise SpecplanError(f"the llama.cpp context holds {self.n_ctx} tokens but this extend needs {past + count} "
                                f"({past} cached + {count} new); raise n_ctx")
        if compact and self._junk and past + count + self._junk > self.n_ctx:
            self._compact()

    def _compact(self) -> None:
        """Rewrite sequence 0 into consecutive cells and free every other cell (an exact copy)."""
        self._drop_path_sequences()
        self._copy(self._context, self._context)
        self.compactions += 1

    def _prepare_tree(self, tree, past: int, count: int) -> tuple[list[int], list[list[int]]]:
        """Give each root-to-leaf path of ``tree`` a sequence holding the committed prefix; return
        every node's position (past + depth) and sequence ids."""
        parents = check_parents(tree.parents)
        if len(parents) != count:
            raise SpecplanError(f"the tree has {len(parents)} nodes but {count} tokens were given; pass one token per node")
        layout = TreeLayout.of(parents)
        if len(layout.paths) > self.max_tree_paths:
            raise SpecplanError(f"the tree has {len(layout.paths)} root-to-leaf paths but this llama.cpp session "
                                f"holds {self.max_tree_paths}; raise max_tree_paths")
        self._drop_path_sequences()
        for index in range(len(layout.paths)):
            self._llama.llama_memory_seq_cp(self._memory, self.committed, self.committed + 1 + index, -1, -1)
        self._tree = layout
        return [past + depth for depth in layout.depths], node_sequence_ids(parents, layout.paths, self.committed)

    def _drop_path_sequences(self) -> None:
        """Remove every path sequence (ids 1 ..): cells no sequence holds any more are freed."""
        if self._tree is not None:
            for index in range(len(self._tree.paths)):
                self._llama.llama_memory_seq_rm(self._memory, self.committed + 1 + index, -1, -1)
        self._tree = None

    def _clear_cache(self) -> None:
        """Free every cell of the cache (the context is this session's alone)."""
        self._llama.llama_memory_clear(self._memory, True)

    def _decode(self, context, tokens: list[int], positions: list[int], sequence_ids: list[list[int]], read=None):
        """llama_decode the tokens in BATCH-sized pieces in ``context`` (the session's own, or its
        wide one). With ``read`` None no logits row is
        requested (returns None); else each piece's rows [n, vocab] are requested and ``read``
        (:class:`CopyRows` or :class:`BestOfRows`) takes what the caller needs of them from
        llama.cpp's buffer, which the next decode overwrites.

        This runs between two decodes, where the engine's time counts and Python runs cold
        (measurements/decode_gaps.py): the rows are viewed through a cached numpy array, copied
        at most once, and handed to torch without a second copy."""
        pieces = []
        for first in range(0, len(tokens), BATCH):
            last = min(first + BATCH, len(tokens))
            self._fill_batch(tokens[first:last], positions[first:last], sequence_ids[first:last], read is not None)
            status = self._llama.llama_decode(context, self._batch)
            if status != 0:
                self._fail_decode(status, first, context)
            if read is not None:
                pieces.append(read.take(self._logits_view(last - first, context)))
        if read is None:
            return None
        return read.join(pieces, self._vocab_size)

    def _logits_view(self, rows: int, context) -> np.ndarray:
        """llama.cpp's logits buffer of ``context`` after a decode (:func:`logits_view`)."""
        return logits_view(self._llama, context, rows, self._vocab_size, self._views)

    def _fill_batch(self, tokens: list[int], positions: list[int], sequence_ids: list[list[int]],
                    logits: bool = True) -> None:
        """Write one decode's tokens, positions, sequence ids and logit flags into the batch."""
        self._batch.n_tokens = fill_batch(self._batch, 0, tokens, positions, sequence_ids, logits)

    def _fail_decode(self, status: int, first: int, context) -> None:
        """Undo what a failed extend left in the cache of ``context`` and raise a one-line SpecplanError."""
        self._drop_path_sequences()
        self._llama.llama_memory_seq_rm(self._llama.llama_get_memory(context), self.committed, len(self.cached), -1)
        reason = "no free cache cells; raise n_ctx" if status == 1 else "set verbose=True to see llama.cpp's reason"
        raise SpecplanError(f"llama_decode failed with status {status} at token {first} of the extend: {reason}")

    # ---- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Free the batch, the context and the model (safe to call twice)."""
        llama = getattr(self, "_llama", None)
        if llama is None:
            return
        if getattr(self, "_batch", None) is not None:
            llama.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_wide", None) is not None:
            self._wide.close()
            self._wide = None
        if getattr(self, "_context", None):
            llama.llama_free(self._context)
        self._context = self._memory = None
        if getattr(self, "_model", None):
            llama.llama_model_free(self._model)
        self._model = None

    def __del__(self) -> None:
        """Free what :meth:`close` frees, quietly (the library may be gone at interpreter exit)."""
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may already be gone
            pass

    def __enter__(self) -> "LlamaCppSession":
        """The session itself; leaving the ``with`` block closes it."""
        return self

    def __exit__(self, *exc_info) -> None:
        """Close the session."""
        self.close()


def high_level_llama(**kwargs):
    """llama-cpp-python's high-level ``Llama(**kwargs)`` (the bench's llama.cpp peers, ``profile
    --engine``), with weight repacking off on a CPU with AMX, where this build's repacking
    segfaults in llama_decode (docs/backends.md, "AMX"). ``Llama`` has no option for it, so its
    model defaults are patched while it loads and restored after."""
    llama_cpp = _llama_cpp()
    if not _has_amx(llama_cpp):
        return llama_cpp.Llama(**kwargs)
    module = llama_cpp.llama_cpp  # Llama.__init__ reads its model parameters from here
    original = module.llama_model_default_params

    def without_repacking():
        params = original()
        params.use_extra_bufts = False
        return params

    module.llama_model_default_params = without_repacking
    try:
        return llama_cpp.Llama(**kwargs)
    finally:
        module.llama_model_default_params = original
