"""``specplan bench PLAN --engine E``: the exported setting and the engine's plain decoding run on
the same prompts, alternating prompt by prompt, one row per method (any engine's methods: a
``run(prompt_ids, max_new_tokens) -> Measurement``, a ``name``, a ``description``).

Decode speed is ms per new token after the first: the prompt's prefill (the forwards that read
the whole prompt, :attr:`specplan.bench.metrics.Measurement.prefill_seconds`) and the token it
yields left out, the quantity the planner predicts (planner-math.md section 1, ms per committed
token in steady decoding; Leviathan et al., arXiv 2211.17192).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specplan.bench.metrics import Measurement
from specplan.bench.run import warm_up


@dataclass(frozen=True)
class EngineRow:
    """One method over all prompts: decode ms per token, whole-call tokens/s, and its outputs."""

    name: str
    description: str
    decode_ms_per_token: float  # decode seconds / decoded tokens (prefill and first token left out), pooled
    new_tokens: int  # decoded tokens (each prompt's first token left out)
    outputs: tuple[tuple[int, ...], ...]  # [prompts] generated ids per prompt
    tokens_per_s: float = 0.0  # every new token over the whole calls' seconds, prefill included
    settings: tuple[tuple[str, object], ...] = ()  # the engine settings the method ran with

    @property
    def decode_tokens_per_s(self) -> float:
        return 1e3 / self.decode_ms_per_token if self.decode_ms_per_token > 0 else 0.0


def decode_ms(measurement: Measurement) -> tuple[float, int]:
    """(decode seconds, decoded tokens) of one run: the prefill and the first token left out."""
    tokens = len(measurement.token_ids)
    return measurement.seconds - (measurement.prefill_seconds or 0.0), max(tokens - 1, 0)


def run_engine_bench(runs: Sequence, prompts: list[list[int]], max_new_tokens: int,
                     warm_up_tokens: int = 0) -> list[EngineRow]:
    """Every method on every prompt, methods alternating per prompt; one row per method.

    ``warm_up_tokens`` > 0: each method first generates that many tokens for the first prompt,
    untimed (a library's first call allocates and picks kernels)."""
    if warm_up_tokens > 0 and prompts:
        warm_up(runs, prompts[0], warm_up_tokens)
    measured: dict[str, list[Measurement]] = {method.name: [] for method in runs}
    for prompt_ids in prompts:
        for method in runs:
            measured[method.name].append(method.run(prompt_ids, max_new_tokens))
    return [_row(method, measured[method.name]) for method in runs]


def _row(method, measurements: list[Measurement]) -> EngineRow:
    """One method's row: decode ms per token pooled over its prompts, and whole-call tokens/s."""
    decoded = [decode_ms(measurement) for measurement in measurements]
    decode_seconds, decode_tokens = sum(s for s, _ in decoded), sum(t for _, t in decoded)
    seconds = sum(measurement.seconds for measurement in measurements)
    new_tokens = sum(measurement.new_tokens for measurement in measurements)
    return EngineRow(method.name, method.description, 1e3 * decode_seconds / max(decode_tokens, 1), decode_tokens,
                     tuple(measurement.token_ids for measurement in measurements),
                     new_tokens / seconds if seconds > 0 else 0.0, tuple(sorted(method.settings.items())))


def agreement(rows: list[EngineRow]) -> float:
    """Share of prompts whose exported output equals the engine's plain output token for token."""
    if len(rows) < 2:
        return 1.0
    pairs = list(zip(rows[0].outputs, rows[1].outputs))
    return sum(plain == exported for plain, exported in pairs) / max(len(pairs), 1)
