"""What the endpoints do between HTTP and the decoder: a checked request becomes a :class:`Job`
(tokens, budget, sampling, stop strings, prediction), and a job's events become OpenAI's bodies."""

from __future__ import annotations

import asyncio
import math
import secrets
import time
import uuid
from dataclasses import dataclass

from specplan.models.chat import encode_messages
from specplan.runtime.build import build_prediction_engine, fallback_guard
from specplan.runtime.context import draft_width
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.prediction import prediction_tokens
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.load_schedule import LoadSchedule
from specplan.core.limits import LONGEST_LOOKUP_CHAIN
from specplan.serve.metrics import ServeMetrics
from specplan.serve.schema import ChatRequest, Common, CompletionRequest, ServeError
from specplan.serve.worker import Finished, Job, QueueFull, Worker

SYSTEM_ROLES = {"developer": "system"}  # OpenAI's newer name for the system turn


@dataclass(frozen=True)
class ServeSettings:
    """``specplan serve``'s options: the model name clients use, the waiting requests allowed, and
    whether the fallback guard plays plain rounds where the plan stops paying (runtime/fallback.py)."""

    alias: str = "specplan"
    queue_size: int = 16
    fallback: bool = True
    parallel: int = 1  # requests decoded together (their rounds share each forward; runtime/batcher.py)
    # a prediction's lengths: the fixed rule (measured faster on the pair's edits, docs/planner-math.md section
    # 12.6), or the plan's ``prediction`` section where it has one ("planned")
    prediction_lengths: str = "rule"

    @property
    def planned_predictions(self) -> bool:
        return self.prediction_lengths == "planned"


def prediction_plan(plan, settings: ServeSettings):
    """The plan whose ``prediction`` section sets a request's prediction lengths, or None: the fixed rule
    (``--prediction-lengths``; runtime/build.py ``prediction_lengths``)."""
    return plan if settings.planned_predictions and plan.prediction is not None else None


class Service:
    """The opened plan (``runner``, a PlanRunner) behind the endpoints, and its decoding worker."""

    def __init__(self, runner, settings: ServeSettings):
        self.runner = runner
        self.settings = settings
        self.metrics = ServeMetrics()
        self.tokenizer = runner.target.tokenizer
        engines = runner.slot_engines(settings.parallel)
        batcher = runner.target.sessions.batcher if settings.parallel > 1 else None
        self.load = self._load_schedule(engines, batcher)
        for engine in engines:
            engine.load = self.load
        if batcher is not None:
            self.metrics.watch(batcher)
        self.worker = Worker(runner, self.metrics, settings.queue_size, self._engine_for, engines, batcher)
        self.context = runner.runtime_backend.context(runner.target)
        self.created = int(time.time())
        # a slot's prediction requests play under one guard (each request measures its own costs): the slot
        # engine's own where it has one (a slot decodes one request at a time), else one of their own
        self.guards = {id(engine): getattr(engine, "guard", None) or
                       (fallback_guard(runner.profile) if settings.fallback else None) for engine in engines}

    def _load_schedule(self, engines, batcher) -> LoadSchedule | None:
        """With several requests decoding together, what each round plays at each load: the plan alone,
        the schedule's row for the requests in flight beside it (runtime/load_schedule.py)."""
        if self.settings.parallel < 2:
            return None
        return self.runner.load_schedule(engines, self.runner.plan, self.settings.parallel, batcher)

    # requests -> jobs

    def check_model(self, name: str) -> None:
        if name != self.settings.alias:
            raise ServeError(404, f"the model `{name}` does not exist; this server serves `{self.settings.alias}`",
                             param="model", code="model_not_found")

    def chat_ids(self, request: ChatRequest) -> list[int]:
        from specplan.serve.schema import joined

        messages = [{"role": SYSTEM_ROLES.get(message.role, message.role), "content": joined(message.content)}
                    for message in request.messages]
        if not any(message["content"].strip() for message in messages):
            raise ServeError(400, "messages: every message is empty; give some text", param="messages")
        return encode_messages(self.tokenizer, messages)

    def completion_ids(self, request: CompletionRequest) -> list[int]:
        return [int(token) for token in self.tokenizer(request.prompt)["input_ids"]]

    def job(self, request: Common, prompt_ids: list[int], budget: int | None,
            loop: asyncio.AbstractEventLoop) -> Job:
        """The job for a checked request; ServeError 400 when it cannot fit the model's context."""
        prediction = request.prediction_text()
        prediction_ids = prediction_tokens(self.tokenizer, prediction) if prediction else None
        width = max(draft_width(self.runner.plan), LONGEST_LOOKUP_CHAIN + 1 if prediction_ids else 0)
        room = self.context - len(prompt_ids) - width
        if room < 1:
            raise ServeError(400, f"the prompt is {len(prompt_ids)} tokens; with a draft of {width} it leaves no room "
                                  f"in this model's context of {self.context} tokens; shorten the prompt",
                             param="messages", code="context_length_exceeded")
        if budget is not None and budget > room:
            raise ServeError(400, f"max_tokens {budget} is over the {room} tokens this prompt leaves in the model's "
                                  f"context of {self.context} (prompt {len(prompt_ids)}, draft {width}); lower max_tokens",
                             param="max_tokens", code="context_length_exceeded")
        temperature = self.runner.plan.temperature if request.temperature is None else request.temperature
        seed = request.seed if request.seed is not None else (secrets.randbits(62) if temperature > 0 else 0)
        sampling = SamplingConfig(temperature, request.top_p, seed)
        return Job(prompt_ids, budget or room, sampling, request.stops(), prediction_ids, loop)

    def submit(self, job: Job) -> None:
        try:
            self.worker.submit(job)
        except QueueFull:
            wait = self._retry_after()
            raise ServeError(429, f"the server is busy: {self.settings.queue_size} requests are waiting; retry in "
                                  f"{wait} s", code="rate_limit_exceeded", kind="rate_limit_error",
                             headers={"Retry-After": str(wait)}) from None

    def _retry_after(self) -> int:
        """Seconds until a place in the queue likely frees: the mean decode time of a request so far (1 s
        before the first), at most a minute."""
        worker = self.worker
        per_request = worker.seconds / worker.done if worker.done else 1.0
        return max(1, math.ceil(min(per_request, 60.0)))

    def _engine_for(self, job: Job, engine):
        """The engine ``job`` runs on in the slot of ``engine``: that engine, or one drafting from the job's prediction."""
        if not job.prediction_ids:
            return engine
        base = engine if isinstance(engine, SpeculativeEngine) else self.runner.plain
        return build_prediction_engine(base, job.prediction_ids, len(job.prompt_ids), guard=self.guards[id(engine)],
                                       plan=prediction_plan(self.runner.plan, self.settings))

    # events -> bodies

    def usage(self, finished: Finished) -> dict:
        return {"prompt_tokens": finished.prompt_tokens, "completion_tokens": finished.completion_tokens,
                "total_tokens": finished.prompt_tokens + finished.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": finished.cached_tokens},
                "completion_tokens_details": {"reasoning_tokens": 0,
                                              "accepted_prediction_tokens": finished.accepted_prediction,
                                              "rejected_prediction_tokens": finished.rejected_prediction}}

    def envelope(self, kind: str) -> dict:
        prefix = "chatcmpl" if kind.startswith("chat") else "cmpl"
        return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()),
                "model": self.settings.alias, "system_fingerprint": self.fingerprint}

    @property
    def fingerprint(self) -> str:
        return "specplan-" + self.runner.target.fingerprint.removeprefix("sha256:")[:12]

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.settings.alias, "object": "model", "created": self.created,
                                            "owned_by": "specplan"}]}
