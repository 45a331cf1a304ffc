"""Bench methods that run through specplan's own runtime: the plan, the runtime's plain
decoding and the grid's configurations.

Each method generates for one prompt and returns a :class:`Measurement` whose forward time
is split into the prefill, the verify forwards of the target and the drafter's forwards.
The split is read from :class:`~specplan.runtime.session.ModelSession`'s own timers
(``forward_seconds``, synchronised on CUDA): for the duration of one generation the bench
wraps each session's forwards (``extend``, ``extend_best_tokens``, ``advance``) to note the
width and time of every one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Protocol

from specplan.bench.metrics import Measurement
from specplan.runtime.adaptive import AdaptiveResult
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.session import ModelSession


class Method(Protocol):
    """Something the bench times: ``name`` (report key), ``kind`` (plan | plain | peer | grid | engine:
    another inference engine's own kernels, whose token identity is reported but not required)."""

    name: str
    kind: str
    description: str

    def run(self, prompt_ids: list[int], max_new_tokens: int) -> Measurement:
        """Generate for ``prompt_ids`` and measure it."""


@dataclass
class ForwardLog:
    """Forwards of one session during one generation: ``calls[i] = (new tokens, seconds)``."""

    calls: list[tuple[int, float]]

    @property
    def seconds(self) -> float:
        return sum(seconds for _, seconds in self.calls)


@contextmanager
def recording(session: ModelSession | None) -> Iterator[ForwardLog]:
    """Note every ``session.extend``, ``session.extend_best_tokens`` (a greedy round's verify that
    reads only the argmax) and ``session.advance`` (a catch-up without logits rows, such as a
    prompt's prefill) with its width and the session's own timing, until exit."""
    log = ForwardLog([])
    if session is None:
        yield log
        return
    originals = {name: getattr(session, name) for name in ("extend", "extend_best_tokens", "advance")}
    depth = [0]  # a session's default advance and extend_best_tokens call its extend: that forward is noted once

    def timed(original):
        def call(tokens, *args, **kwargs):
            before = session.forward_seconds
            depth[0] += 1
            try:
                result = original(tokens, *args, **kwargs)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                log.calls.append((len(tokens), session.forward_seconds - before))
            return result
        return call

    for name, original in originals.items():
        setattr(session, name, timed(original))  # an instance attribute shadows the method until deleted
    try:
        yield log
    finally:
        for name in originals:
            delattr(session, name)


def drafter_sessions(drafter) -> list[ModelSession]:
    """The model sessions a drafter runs: its own, or every one below a hierarchy's top."""
    return list(drafter.sessions()) if drafter is not None else []


class EngineMethod:
    """A :class:`SpeculativeEngine` (plan, plain decoding or a grid configuration) as a bench method."""

    def __init__(self, name: str, kind: str, engine: SpeculativeEngine, sampling: SamplingConfig,
                 description: str, drafter: str | None = None, gamma: int = 0):
        self.name = name
        self.kind = kind
        self.engine = engine
        self.sampling = sampling
        self.description = description
        self.drafter = drafter  # profile id of the drafter (None: plain decoding)
        self.gamma = gamma

    def run(self, prompt_ids: list[int], max_new_tokens: int) -> Measurement:
        with ExitStack() as stack:
            target = stack.enter_context(recording(self.engine.target))
            below = [stack.enter_context(recording(session)) for session in drafter_sessions(self.engine.drafter)]
            result = self.engine.generate(prompt_ids, max_new_tokens, self.sampling)
        calls: Sequence[tuple[int, float]] = target.calls
        prefill = 0.0
        if len(prompt_ids) > 1 and calls:  # the engine prefills all but the last prompt token first
            prefill, calls = calls[0][1], calls[1:]
        return Measurement(
            token_ids=tuple(result.token_ids),
            seconds=result.seconds,
            target_forwards=result.target_forwards,
            forward_seconds=target.seconds + sum(log.seconds for log in below),
            prefill_seconds=prefill,
            draft_seconds=result.draft_seconds,
            verify_forward_seconds=sum(seconds for _, seconds in calls),
            verify_widths=tuple(width for width, _ in calls),
            configurations=tuple(use.as_record() for use in result.configurations)
            if isinstance(result, AdaptiveResult) else (),
        )
