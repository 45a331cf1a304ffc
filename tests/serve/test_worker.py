"""The decoding worker without a model: a decode that fails sends the client a Failed event, empties
the target's cache (the prompt cache keeps nothing a failed request left) and the worker goes on."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from specplan.runtime.drafters.base import SamplingConfig
from specplan.serve.metrics import ServeMetrics
from specplan.serve.worker import Failed, Job, Worker


class BrokenEngine:
    def __init__(self):
        self.target = SimpleNamespace(resets=0)
        self.target.reset = lambda: setattr(self.target, "resets", self.target.resets + 1)

    def generate(self, *args, **kwargs):
        raise RuntimeError("llama_decode failed")


def test_a_failed_decode_reports_the_error_and_empties_the_cache():
    loop = asyncio.new_event_loop()
    engine = BrokenEngine()
    runner = SimpleNamespace(target=SimpleNamespace(tokenizer=None))
    worker = Worker(runner, ServeMetrics(), 2, lambda job, slot_engine: slot_engine, [engine])
    job = Job([1, 2, 3], 4, SamplingConfig(), (), None, loop)
    worker._one(job, engine)
    loop.run_until_complete(asyncio.sleep(0))  # deliver the call_soon_threadsafe events
    event = job.events.get_nowait()
    loop.close()
    assert isinstance(event, Failed) and "llama_decode failed" in event.message
    assert engine.target.resets == 1 and not worker.busy and worker.done == 0
