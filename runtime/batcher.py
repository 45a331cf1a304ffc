"""Several requests' forwards decoded together: each request's engine runs in a thread of its own and
its sessions hand their extends to one :class:`Batcher`, which decodes every waiting extend of one shared
model in one batched forward once no request's thread is running (a step of every request in flight,
as vLLM v1's scheduler batches a step). The shared model is a backend's: a llama.cpp context whose
unified cache holds every slot (runtime/llama_cpp_shared.py), or a torch network whose batched cache
holds one row per slot (runtime/torch_shared.py); each gives the batcher ``decode_together(submissions)``.

Lossless: a step only groups forwards that each request's engine would have run alone; which round a
request plays depends on its own text and measurements (runtime/fallback.py), so each request's output is
what its engine gives alone, up to how the backend's kernels sum a batch (docs/backends.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from specplan.runtime.drafters.base import SamplingConfig
    from specplan.runtime.engine import GenerationResult, SpeculativeEngine

T = TypeVar("T")


class Batcher:
    """Decodes the requests' extends together: once no thread in a request is running (each waits on
    a decode, or has none pending), every waiting extend goes into one decode per model.

    A thread enters :meth:`request` for each request it decodes. :meth:`step` runs on the thread that
    made the batcher (the decoding thread: llama.cpp's OpenMP team belongs to the thread that calls it);
    an extend from that thread, or from a thread in no request, decodes at once on its own."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        # one batched forward or cache edit at a time, whichever thread calls it: the slots share one cache, and
        # both backends release the GIL in their calls (two threads' edits would change it at once)
        self.cache_lock = threading.Lock()
        self._running: set[int] = set()  # threads in a request and not waiting on a decode
        self._members: set[int] = set()  # threads in a request
        self._pending: list[tuple[object, object]] = []  # (shared model, its submission)
        self.owner = threading.get_ident()
        self.steps = 0  # batched decodes run
        self.extends = 0  # extends they carried
        self.decode_seconds = 0.0  # wall time of those steps' decodes (the rest of a request's time is the host's)

    @contextmanager
    def request(self) -> Iterator[None]:
        """The calling thread decodes one request: the batcher waits for its extends."""
        me = threading.get_ident()
        with self._condition:
            self._members.add(me)
            self._running.add(me)
        try:
            yield
        finally:
            with self._condition:
                self._members.discard(me)
                self._running.discard(me)
                self._condition.notify_all()

    def submit(self, shared, submission) -> None:
        """Decode ``submission`` (with ``done`` and ``thread`` attributes) on ``shared`` (with ``decode_together``):
        with the other requests' extends, or at once outside one."""
        me = threading.get_ident()
        with self._condition:
            alone = me == self.owner or me not in self._members
        if alone:
            with self.cache_lock:
                shared.decode_together([submission])
            return
        submission.thread = me
        with self._condition:
            self._pending.append((shared, submission))
            self._running.discard(me)
            self._condition.notify_all()
            self._condition.wait_for(lambda: submission.done)  # step marks this thread running again

    def step(self, timeout: float) -> bool:
        """Decode every waiting extend once no request's thread runs; False when none was ready in ``timeout`` s."""
        with self._condition:
            if not self._condition.wait_for(lambda: self._pending and not self._running, timeout):
                return False
            pending, self._pending = self._pending, []
        started = time.perf_counter()
        try:
            with self.cache_lock:
                for shared in dict.fromkeys(context for context, _ in pending):
                    shared.decode_together([submission for context, submission in pending if context is shared])
        finally:
            self.decode_seconds += time.perf_counter() - started
            with self._condition:
                for _, submission in pending:  # running from here: the next step waits for its next extend
                    submission.done = True
                    if submission.thread in self._members:
                        self._running.add(submission.thread)
                self.steps += 1
                self.extends += len(pending)
                self._condition.notify_all()
        return True

    @property
    def active(self) -> int:
        """Threads in a request now."""
        return len(self._members)


def run_together(batcher: Batcher, tasks: Sequence[Callable[[], T]], poll: float = 0.05) -> list[T]:
    """Each task on a thread of its own inside a request of ``batcher``, their extends decoded together by
    this thread (the batcher's owner) until every task returns; their results in order. The first task
    that raised raises here once all are done (the others finish their requests first)."""
    results: list = [None] * len(tasks)
    errors: list[BaseException] = []

    def one(index: int) -> None:
        with batcher.request():
            try:
                results[index] = tasks[index]()
            except BaseException as error:  # raised again on the calling thread
                errors.append(error)

    threads = [threading.Thread(target=one, args=(index,), daemon=True, name=f"specplan-sequence-{index}")
               for index in range(len(tasks))]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        batcher.step(poll)
    if errors:
        raise errors[0]
    return results


@dataclass(frozen=True)
class TogetherResult:
    """Prompts decoded together: each one's result (in prompt order), the wall time of them all (prefills
    included) and the batched forwards the batcher ran for them (every shared model's)."""

    sequences: tuple[GenerationResult, ...]
    seconds: float
    steps: int

    @property
    def new_tokens(self) -> int:
        return sum(len(sequence.token_ids) for sequence in self.sequences)

    @property
    def tokens_per_s(self) -> float:
        """Tokens committed per second by all the prompts together (goodput)."""
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        """Goodput of the decode alone: the tokens committed after each prompt's first round, over the
        seconds after the last first round ended (the prompts prefill together in the first step)."""
        first = max((sequence.first_seconds for sequence in self.sequences), default=0.0)
        tokens = self.new_tokens - sum(sequence.first_tokens for sequence in self.sequences)
        return tokens / (self.seconds - first) if self.seconds > first and tokens > 0 else 0.0


def generate_together(batcher: Batcher | None, engines: Sequence[SpeculativeEngine], prompt_ids: Sequence[list[int]],
                      max_new_tokens: int, samplings: Sequence[SamplingConfig]) -> TogetherResult:
    """Prompt i decoded by ``engines[i]`` with ``samplings[i]``, all together (:func:`run_together`); without a
    batcher (one engine) the one prompt alone."""
    tasks = [partial(engine.generate, list(ids), max_new_tokens, sampling)
             for engine, ids, sampling in zip(engines, prompt_ids, samplings, strict=True)]
    steps = batcher.steps if batcher is not None else 0
    start = time.perf_counter()
    results = run_together(batcher, tasks) if batcher is not None else [task() for task in tasks]
    seconds = time.perf_counter() - start
    return TogetherResult(tuple(results), seconds, batcher.steps - steps if batcher is not None else
                          sum(result.target_forwards + 1 for result in results))
