"""T(n) measured by llama.cpp (llama-cpp-python) on a GGUF file: what the engine costs.

One llama.cpp ``decode`` of n new tokens over ``context`` cached ones, with logits for all n
(as llama-server's verification of a draft needs them): the cache is filled once with
``context`` tokens, and each timed call first removes what the previous call appended
(``kv_cache_seq_rm``), so every call sees the same cache. Each n is run once untimed (warm-up)
and then ``repeats`` times; the curve keeps the median. Curves are tagged ``source: llama.cpp``
(docs/formats.md, "profile.yaml"); T(n) is the quantity of docs/planner-math.md section 2.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from specplan.runtime.llama_cpp_session import high_level_llama
from specplan.core.profile import LatencyCurve

SOURCE = "llama.cpp"


def measure_curve(gguf: str | Path, context: int, ns: tuple[int, ...], repeats: int = 5, threads: int = 2) -> LatencyCurve:
    """llama.cpp's T(n) for the model in ``gguf`` at ``context`` cached tokens, n in ``ns``."""

    largest = max(ns)
    llm = high_level_llama(model_path=str(gguf), n_ctx=context + largest + 8, n_batch=max(context, largest),
                          n_ubatch=max(context, largest), n_threads=threads, n_threads_batch=threads, verbose=False)
    try:
        vocab = llm.n_vocab()
        cached = [(7 * index + 11) % vocab for index in range(context)]  # any tokens: cost does not depend on them
        llm._batch.set_batch(cached, 0, False)
        llm._ctx.decode(llm._batch)
        ms = tuple(_median_ms(llm, context, n, repeats) for n in ns)
    finally:
        llm.close()
    return LatencyCurve(context, tuple(ns), ms, SOURCE)


def _median_ms(llm, context: int, n: int, repeats: int) -> float:
    new = [(13 * index + 5) % llm.n_vocab() for index in range(n)]
    times = []
    for attempt in range(repeats + 1):
        llm._ctx.kv_cache_seq_rm(-1, context, -1)
        llm._batch.set_batch(new, context, True)  # logits for every new token
        started = time.perf_counter()
        llm._ctx.decode(llm._batch)
        if attempt:  # the first call warms up
            times.append((time.perf_counter() - started) * 1e3)
    return statistics.median(times)
