"""The bench's per-prompt measurements, the lossless check and the per-category aggregates.

Terms (defined once; Spec-Bench, arXiv 2401.07851):

- *tokens/s*: new tokens over wall seconds of the whole call, prefill included. Aggregates
  divide total tokens by total seconds (a long prompt weighs by its tokens, not once).
- *speedup*: a method's tokens/s over `plain`'s on the same prompts, measured in the same run.
- *accepted per target forward*: committed tokens per forward of the target that commits
  tokens, bonus included (plain decoding: 1.0).
- *overhead*: the share of wall time spent outside model forwards (target and drafter
  networks): bookkeeping, verification, retrieval lookups, generation loops.
- *lossless*: the output is token-identical to the reference (`plain`). In bfloat16 / float16
  a forward over n tokens is not bit-identical to n decode steps, so an output may part from
  the reference at a numerical near-tie: the target's top-2 logit gap at the first divergence
  below ``NEAR_TIE``. In float32 every divergence is a failure.
- *spread over prompts*: the 95% interval of a pooled rate or speedup when the prompts are
  resampled with replacement (the percentile bootstrap; Efron, "Bootstrap methods", Ann. Statist.
  7(1), 1979): which prompts ran moves a result this much (docs/results.md, "Where the
  predictions on edits go wrong").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from specplan.runtime.lossless import NEAR_TIE, LosslessCheck

SPREAD_LEVEL = 0.95  # the coverage of a spread over prompts
SPREAD_RESAMPLES = 4000
SPREAD_SEED = 0  # fixed: a report's interval does not change from one reading to the next


def pooled_rate(sums: np.ndarray) -> np.ndarray:
    """Rows of summed (tokens, seconds, ...) -> tokens / seconds."""
    return sums[:, 0] / sums[:, 1]


def pooled_rate_ratio(sums: np.ndarray) -> np.ndarray:
    """Rows of summed (tokens, seconds, reference tokens, reference seconds) -> the rates' ratio."""
    return pooled_rate(sums) / pooled_rate(sums[:, 2:])


def spread_of_sums(columns: Sequence[Sequence[float]], statistic: Callable[[np.ndarray], np.ndarray]) -> tuple[float, float] | None:
    """The spread over prompts (module docstring) of ``statistic`` of the column sums.

    ``columns``: one row per prompt (e.g. its tokens and seconds); ``statistic`` maps the sums
    of resampled prompts [resamples, columns] to one value per resample. None for fewer than 2 prompts.

    >>> low, high = spread_of_sums([[100, 2.0], [100, 2.0], [100, 4.0], [100, 4.0]], pooled_rate)
    >>> 25.0 <= low < 100 / 3 < high <= 50.0
    True
    """
    rows = np.asarray(columns, dtype=float)
    if rows.ndim != 2 or len(rows) < 2:
        return None
    picks = np.random.default_rng(SPREAD_SEED).integers(0, len(rows), (SPREAD_RESAMPLES, len(rows)))
    with np.errstate(divide="ignore", invalid="ignore"):
        values = statistic(rows[picks].sum(axis=1))
    values = values[np.isfinite(values)]
    if not len(values):
        return None
    tail = 100 * (1 - SPREAD_LEVEL) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class Measurement:
    """One generation by one method on one prompt, with its forward-time split."""

    token_ids: tuple[int, ...]  # [new_tokens] generated ids, EOS included when it stopped there
    seconds: float  # wall time of the call, prefill included
    target_forwards: int  # forwards of the target that committed tokens (a runtime prefill commits none)
    forward_seconds: float  # inside model forwards (target and drafter networks), prefill included
    prefill_seconds: float | None = None  # the target's forward over the prompt; None: not separable
    draft_seconds: float | None = None  # drafting (drafter forwards, lookups), runtime methods only
    verify_forward_seconds: float | None = None  # target forwards after the prefill, runtime methods only
    verify_widths: tuple[int, ...] = ()  # [target_forwards] new tokens in each verify forward (runtime)
    configurations: tuple[dict, ...] = ()  # an adaptive plan's: each configuration that ran, its rounds and tokens
    # new tokens the prefill itself yielded: 1 where the forward over the whole prompt gives the first token
    # (llama-server, llama-cpp-python's generate, transformers), 0 for the runtime, whose prefill reads the
    # prompt less its last token and whose first round yields the first token
    prefill_tokens: int = 0

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def decode_seconds(self) -> float | None:
        """Wall time after the prefill (what the planner's ms-per-token prediction covers)."""
        return None if self.prefill_seconds is None else self.seconds - self.prefill_seconds

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens the decode forwards yielded over the time after the prefill (llama-server's own
        ``predicted_per_second`` convention: the prefill's token is not a decode step's)."""
        decode = self.decode_seconds
        return (self.new_tokens - self.prefill_tokens) / decode if decode else None

    @property
    def mean_accepted(self) -> float:
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def overhead_share(self) -> float:
        return max(0.0, 1.0 - self.forward_seconds / self.seconds) if self.seconds > 0 else 0.0





def lossless_verdict(checks: Sequence[LosslessCheck], dtype: str) -> tuple[bool, str]:
    """Pass iff every output is identical (float32), or every divergence is a near-tie (lower precision)."""
    different = [c for c in checks if not c.identical]
    if not different:
        return True, f"{len(checks)}/{len(checks)} identical"
    ties = sum(c.near_tie for c in different)
    text = f"{len(checks) - len(different)}/{len(checks)} identical, {ties} near-tie divergence(s)"
    if dtype == "float32":
        return False, text + "; float32 must be token-identical"
    if ties < len(different):
        return False, text + f", {len(different) - ties} divergence(s) with a top-2 gap >= {NEAR_TIE}"
    return True, text + f" (top-2 gap < {NEAR_TIE}, {dtype} arithmetic)"


@dataclass(frozen=True)
class Row:
    """One (prompt, method) result as reported."""

    prompt_id: str
    category: str
    method: str
    measurement: Measurement
    check: LosslessCheck | None  # None: not checked (sampling)
    speedup: float  # tokens/s over the baseline's on this prompt
    predicted_tokens_per_s: float | None = None

    def to_dict(self) -> dict:
        m = self.measurement
        decode = m.decode_tokens_per_s
        return {
            "prompt_id": self.prompt_id, "category": self.category, "method": self.method,
            "new_tokens": m.new_tokens, "seconds": round(m.seconds, 4), "tokens_per_s": round(m.tokens_per_s, 3),
            "decode_tokens_per_s": round(decode, 3) if decode is not None else None,
            "speedup": round(self.speedup, 4), "target_forwards": m.target_forwards,
            "mean_accepted": round(m.mean_accepted, 4), "overhead_share": round(m.overhead_share, 4),
            "predicted_tokens_per_s": None if self.predicted_tokens_per_s is None else round(self.predicted_tokens_per_s, 3),
            "identical": None if self.check is None else self.check.identical,
            "divergence_index": None if self.check is None else self.check.index,
            "divergence_gap": None if self.check is None else finite_or_none(self.check.gap),
            "near_tie": None if self.check is None else self.check.near_tie,
            "flip_width": None if self.check is None else self.check.flip_width, "token_ids": list(m.token_ids),
            **({"configurations": list(m.configurations)} if m.configurations else {}),
        }


def _quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def aggregate(rows: Sequence[Row], baseline_rows: Sequence[Row], dtype: str) -> dict:
    """Totals of one method over some prompts, against the baseline's rows on the same prompts."""
    if not rows:
        return {"prompts": 0}
    tokens = sum(r.measurement.new_tokens for r in rows)
    seconds = sum(r.measurement.seconds for r in rows)
    forwards = sum(r.measurement.target_forwards for r in rows)
    inside = sum(r.measurement.forward_seconds for r in rows)
    prompts = {r.prompt_id for r in rows}
    base = [r for r in baseline_rows if r.prompt_id in prompts]
    base_rate = sum(r.measurement.new_tokens for r in base) / sum(r.measurement.seconds for r in base) if base else 0.0
    rate = tokens / seconds if seconds > 0 else 0.0
    speedups = [r.speedup for r in rows]
    low, high = _quartiles(speedups)
    by_prompt = {r.prompt_id: r.measurement for r in base}
    paired = [(r.measurement, by_prompt[r.prompt_id]) for r in rows if r.prompt_id in by_prompt]
    spread = spread_of_sums([[m.new_tokens, m.seconds, b.new_tokens, b.seconds] for m, b in paired], pooled_rate_ratio)
    checks = [r.check for r in rows if r.check is not None]
    ok, verdict = lossless_verdict(checks, dtype) if checks else (None, "not checked")
    return {
        "prompts": len(rows), "new_tokens": tokens, "seconds": round(seconds, 3),
        "tokens_per_s": round(rate, 3),
        "median_tokens_per_s": round(statistics.median(r.measurement.tokens_per_s for r in rows), 3),
        "speedup": round(rate / base_rate, 4) if base_rate else None,
        "median_speedup": round(statistics.median(speedups), 4),
        "speedup_quartiles": [round(low, 4), round(high, 4)],
        "speedup_interval": [round(spread[0], 4), round(spread[1], 4)] if spread else None,  # spread over prompts
        "speedup_range": [round(min(speedups), 4), round(max(speedups), 4)],
        "mean_accepted": round(tokens / forwards, 4) if forwards else None,
        "overhead_share": round(max(0.0, 1.0 - inside / seconds), 4) if seconds > 0 else None,
        "identical": sum(c.identical for c in checks),
        "near_ties": sum(c.near_tie for c in checks),
        "lossless": ok, "lossless_detail": verdict,
    }


def finite_or_none(value: float | None, digits: int = 4) -> float | None:
    """JSON-safe rounding: None for None, NaN or infinity."""
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)
