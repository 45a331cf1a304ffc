"""Wide extends on a second copy of the weights that llama.cpp does not repack (docs/backends.md,
"Wide verifies on unrepacked weights").

llama.cpp's fast CPU path repacks quantized weights when it loads them ("extra buffer types"),
for kernels that favour few tokens per decode: on this project's 2-core AVX-512 CPU a one-token
decode of Qwen2.5-Coder-1.5B Q4_K_M takes 35 ms repacked and 46 ms not, but a 64-token decode 814
ms repacked and 692 ms not (measurements/wide_verify.py). A session given ``wide_from`` holds both:
its own context over the repacked weights, and a :class:`WideContext` over the same GGUF file
loaded as it is, where chain extends of ``wide_from`` tokens or more are decoded. Each context
knows how many of the committed tokens it holds (``held``); before one of them decodes, sequence 0
is copied to it from the other when it lags (:func:`copy_committed`), so a run of plain rounds or
a run of long verifies copies nothing.

The two kernels round differently, so a wide verify's logits are those of llama.cpp's fast
numerics, not bit-identical to one-token decodes (the fast numerics never were).
"""

from __future__ import annotations

import ctypes

from specplan.core.errors import ModelError, SpecplanError

COMMITTED = 0  # the sequence id of the committed text (as in llama_cpp_session)


class StateBuffer:
    """A reusable byte buffer for sequence-state copies (a 512-token Qwen2.5-1.5B state is 15 MB)."""

    def __init__(self) -> None:
        self._array = None

    def of_size(self, size: int):
        """A ctypes byte array of at least ``size`` bytes."""
        if self._array is None or len(self._array) < size:
            self._array = (ctypes.c_uint8 * size)()
        return self._array


def copy_sequence(llama, source, destination, buffer: StateBuffer, sequence: int = COMMITTED,
                  free_others: bool = False) -> None:
    """Make ``destination``'s ``sequence`` hold exactly ``source``'s (``llama_state_seq_get_data`` / ``set_data``:
    the keys and values copied as they are, in consecutive cells); with ``free_others`` every other cell of
    ``destination`` is freed, else only what ``sequence`` held there. ``source`` may be ``destination``
    (a compaction, with ``free_others``)."""
    size = llama.llama_state_seq_get_size(source, sequence)
    state = buffer.of_size(size)
    written = llama.llama_state_seq_get_data(source, state, size, sequence)
    if free_others:
        llama.llama_memory_clear(llama.llama_get_memory(destination), True)
    else:
        llama.llama_memory_seq_rm(llama.llama_get_memory(destination), sequence, -1, -1)
    if written != size or llama.llama_state_seq_set_data(destination, state, size, sequence) != size:
        raise SpecplanError(f"llama.cpp could not copy sequence {sequence} of the cache")


def copy_committed(llama, source, destination, buffer: StateBuffer) -> None:
    """Make ``destination``'s cache hold exactly ``source``'s sequence 0 (:func:`copy_sequence`); every other
    cell of ``destination`` is freed. ``source`` may be ``destination`` (a compaction)."""
    copy_sequence(llama, source, destination, buffer, COMMITTED, free_others=True)


class WideView:
    """A session's committed ``sequence`` in the context over the unrepacked weights (``context``,
    ``memory``): ``held``, how many of the session's committed tokens it holds there (exactly those,
    at positions 0 .. held - 1). A slot session's view of a shared wide context is one of these
    (runtime/llama_cpp_shared.py); a session alone owns its :class:`WideContext`."""

    def __init__(self, llama, context, memory, sequence: int = COMMITTED) -> None:
        self._llama, self.context, self.memory, self.sequence = llama, context, memory, sequence
        self.held = 0

    def trim(self, length: int) -> None:
        """Drop the sequence's cells from position ``length`` on."""
        if length < self.held:
            self._llama.llama_memory_seq_rm(self.memory, self.sequence, length, -1)
            self.held = length

    def clear(self) -> None:
        """Free the sequence's cells."""
        self._llama.llama_memory_seq_rm(self.memory, self.sequence, -1, -1)
        self.held = 0


class WideContext(WideView):
    """A session's second copy of its GGUF (``model``, loaded without repacking; freed with this)
    and one context over it (one sequence), for the session's wide chain extends."""

    def __init__(self, llama, model, params) -> None:
        """Create a context with ``params`` over ``model``; ModelError (one line) when llama.cpp cannot."""
        super().__init__(llama, None, None)
        self.model = model
        self.context = llama.llama_init_from_model(model, params)
        if not self.context:
            self.close()
            raise ModelError("llama.cpp could not create the context of the unrepacked copy for wide verifies; "
                             "lower n_ctx, or profile without wide verifies")
        self.memory = llama.llama_get_memory(self.context)

    def clear(self) -> None:
        """Free every cell."""
        self._llama.llama_memory_clear(self.memory, True)
        self.held = 0

    def close(self) -> None:
        """Free the context and the model (safe to call twice)."""
        if self.context:
            self._llama.llama_free(self.context)
        self.context = self.memory = None
        if getattr(self, "model", None):
            self._llama.llama_model_free(self.model)
        self.model = None
