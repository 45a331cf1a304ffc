"""The decoding worker: the main thread owns the opened plan and decodes the queued requests, in turn or,
with several slots, together (runtime/batcher.py).

The HTTP side (an asyncio loop) puts a :class:`Job` in a bounded queue and reads its events; the
worker runs the plan's engine on it (or, with a ``prediction``, an engine that drafts from it:
runtime/drafters/prediction.py) and hands back each round's final text. A job whose client left,
or whose stop string was committed, ends after the round in flight (``on_commit`` returns True).
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.prediction import PredictionDrafter
from specplan.serve.metrics import ServeMetrics
from specplan.serve.text import TextStream


@dataclass(frozen=True)
class Delta:
    text: str


@dataclass(frozen=True)
class Finished:
    """The end of a job: OpenAI's ``finish_reason`` and ``usage`` counts."""

    reason: str  # stop | length
    prompt_tokens: int
    completion_tokens: int
    accepted_prediction: int = 0
    rejected_prediction: int = 0
    seconds: float = 0.0
    cached_tokens: int = 0  # prompt tokens the target's cache held from the last request (not prefilled)


@dataclass(frozen=True)
class Failed:
    message: str


@dataclass
class Job:
    prompt_ids: list[int]
    max_tokens: int
    sampling: SamplingConfig
    stops: tuple[str, ...]
    prediction_ids: list[int] | None
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def emit(self, event: Delta | Finished | Failed) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the loop closed: nobody reads the events any more
            pass


class QueueFull(Exception):
    pass


class Worker:
    """Decodes jobs on ``runner`` (a :class:`~specplan.runtime.runner.PlanRunner`); at most
    ``queue_size`` wait. ``engine_for(job, engine)`` builds the engine a job runs on from a slot's
    ``engine`` (``engines``: one per request decoded at once; default the runner's own).

    :meth:`run` decodes on the calling thread, the main thread in ``specplan serve``: llama.cpp
    decodes called from another thread ran 12-15% slower here (its OpenMP team per calling thread;
    2-core AMD EPYC, SmolLM2 plan, 5 edit prompts x 128 tokens, three pairs). With several engines
    (``batcher``: runtime/batcher.py) each slot's requests run in a thread of their own and
    the calling thread runs the batcher, which decodes their rounds together."""

    def __init__(self, runner, metrics: ServeMetrics, queue_size: int, engine_for, engines=None, batcher=None):
        self.runner = runner
        self.metrics = metrics
        self.engine_for = engine_for
        self.engines = list(engines) if engines else [runner.engine]
        self.batcher = batcher
        self.jobs: queue.Queue = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self.active = 0  # jobs being decoded
        self.done = 0  # jobs decoded
        self.seconds = 0.0  # their decode time

    @property
    def busy(self) -> bool:
        return self.active > 0

    def submit(self, job: Job) -> None:
        try:
            self.jobs.put_nowait(job)
        except queue.Full:
            raise QueueFull from None
        self.metrics.queued.set(self.jobs.qsize())

    def run(self, finished: Callable[[], bool], poll: float = 0.05) -> None:
        """Decode queued jobs until ``finished()`` and nothing waits or decodes."""
        if self.batcher is None:
            self._slot(self.engines[0], finished, poll)
            return
        stopping = threading.Event()
        slots = [threading.Thread(target=self._slot, args=(engine, stopping.is_set, poll), daemon=True,
                                  name=f"specplan-slot-{index}") for index, engine in enumerate(self.engines)]
        for slot in slots:
            slot.start()
        try:
            while not (finished() and self.jobs.empty() and not self.active):
                self.batcher.step(poll)
        finally:
            stopping.set()
            while any(slot.is_alive() for slot in slots):
                self.batcher.step(poll)  # a slot may still be decoding its last job

    def _slot(self, engine, finished: Callable[[], bool], poll: float) -> None:
        """Take queued jobs and decode them on ``engine`` until ``finished()`` and nothing waits."""
        while True:
            try:
                job = self.jobs.get(timeout=poll)
            except queue.Empty:
                if finished():
                    return
                continue
            self.metrics.queued.set(self.jobs.qsize())
            if not job.cancelled.is_set():
                self._one(job, engine)

    def _one(self, job: Job, engine) -> None:
        with self._lock:
            self.active += 1
            self.metrics.active.set(self.active)
        start = time.perf_counter()
        try:
            if self.batcher is None:
                job.emit(self._decode(job, engine))
            else:
                with self.batcher.request():
                    job.emit(self._decode(job, engine))
            with self._lock:
                self.done += 1
                self.seconds += time.perf_counter() - start
        except Exception as error:  # a bug must not end the server: the client gets a 500 body
            job.emit(Failed(f"{type(error).__name__}: {error}"))
        finally:
            with self._lock:
                self.active -= 1
                self.metrics.active.set(self.active)

    def _decode(self, job: Job, slot_engine) -> Finished:
        engine = self.engine_for(job, slot_engine)
        text = TextStream(self.runner.target.tokenizer, job.stops)

        def on_commit(chunk: list[int]) -> bool:
            delta = text.add(chunk)
            if delta:
                job.emit(Delta(delta))
            return text.stopped or job.cancelled.is_set()

        start = time.perf_counter()
        try:
            result = engine.generate(job.prompt_ids, job.max_tokens, job.sampling, on_commit, keep_cache=True)
        except Exception:
            engine.target.reset()  # the next request keeps nothing a failed one left in the cache
            raise
        tail = text.finish()
        if tail:
            job.emit(Delta(tail))
        self.metrics.record(result, len(job.prompt_ids))
        drafter = engine.drafter if isinstance(getattr(engine, "drafter", None), PredictionDrafter) else None
        if drafter is not None:
            drafter.settle(job.prompt_ids + list(result.token_ids))
        reason = "length" if result.stop_reason == "max_new_tokens" and not text.stopped else "stop"
        return Finished(reason, len(job.prompt_ids), len(result.token_ids),
                        drafter.accepted if drafter else 0, drafter.rejected if drafter else 0,
                        time.perf_counter() - start, result.cached_tokens)
