"""``/metrics``: the server's counters in Prometheus' text format (prometheus-client), one registry
per server so that nothing else in the process adds to it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector


class ServeMetrics:
    def __init__(self):
        disable_created_metrics()  # no *_created series beside each counter: they clutter /metrics
        self.registry = CollectorRegistry()
        registry = self.registry
        self.requests = Counter("specplan_requests", "HTTP requests answered, by endpoint and status",
                                ["endpoint", "status"], registry=registry)
        self.prompt_tokens = Counter("specplan_prompt_tokens", "prompt tokens decoded", registry=registry)
        self.completion_tokens = Counter("specplan_completion_tokens", "tokens generated", registry=registry)
        self.drafted_tokens = Counter("specplan_drafted_tokens", "draft tokens the target verified", registry=registry)
        self.accepted_tokens = Counter("specplan_accepted_tokens", "draft tokens the target accepted", registry=registry)
        self.rounds = Counter("specplan_rounds", "target verify forwards (rounds)", registry=registry)
        self.plain_rounds = Counter("specplan_plain_rounds", "rounds the fallback guard played as plain decoding",
                                    registry=registry)
        self.decode_seconds = Counter("specplan_decode_seconds", "seconds spent decoding requests", registry=registry)
        self.active = Gauge("specplan_active_requests", "requests being decoded", registry=registry)
        self.queued = Gauge("specplan_queued_requests", "requests waiting for the decoder", registry=registry)

    def watch(self, batcher) -> None:
        """Export ``batcher``'s steps (``serve --parallel N``: runtime/batcher.py) as counters."""
        self.registry.register(_BatcherCollector(batcher))

    def record(self, result, prompt_tokens: int) -> None:
        """Add one finished generation (a GenerationResult) to the counters."""
        self.prompt_tokens.inc(prompt_tokens)
        self.completion_tokens.inc(len(result.token_ids))
        self.rounds.inc(result.target_forwards)
        self.plain_rounds.inc(result.plain_rounds)
        self.decode_seconds.inc(result.seconds)
        if result.stages:
            top = result.stages[-1]
            self.accepted_tokens.inc(top.accepted)
            self.drafted_tokens.inc(top.drafted)

    def text(self) -> bytes:
        return generate_latest(self.registry)


class _BatcherCollector(Collector):
    """The batched forwards of requests decoded together and the seconds their decodes took: against the wall
    time, the share the host (drafting, verifying, streaming, waiting for a slow request's thread) leaves the
    machine's cores idle."""

    def __init__(self, batcher):
        self.batcher = batcher

    def collect(self):
        steps = CounterMetricFamily("specplan_batched_forwards", "batched decodes of the requests in flight (steps)")
        steps.add_metric([], self.batcher.steps)
        seconds = CounterMetricFamily("specplan_batched_forward_seconds", "seconds those decodes took")
        seconds.add_metric([], self.batcher.decode_seconds)
        yield steps
        yield seconds
