"""Predicted Outputs (OpenAI's ``prediction``, the text a client expects back) as a drafter the planner
costs: its lengths, the profile's replayed calibration and the plan's chosen lengths
(docs/planner-math.md section 12.6; docs/formats.md). No torch here.

- :func:`rule_lengths`: the fixed rule a plan without a ``prediction`` section keeps: ``L_0`` (``first``,
  the chain after each (re)alignment) and ``m_min`` (``min_match``, the output tokens that align a lost
  prediction again).
- :class:`PredictionCalibration` (profile.yaml ``prediction``): per candidate ``(first, min_match)`` of
  :data:`FIRST_CHAINS` x :data:`MIN_MATCHES`, the rounds a prediction drafter played over the target's
  greedy outputs on the calibration prompts that carried a prediction, counted by drafted length
  (profiler/prediction_acceptance.py). Every candidate replays the same outputs, so its time per token
  is its rounds' verify times over the same token count (planner/prediction.py).
- :class:`PredictionLengths` (plan.yaml ``prediction``): the candidate the planner chose and its
  predicted speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from specplan.core.limits import LONGEST_LOOKUP_CHAIN, check_count

FIRST_CHAIN = 15  # the rule's L_0: draft tokens a newly aligned prediction proposes (a verify of 16)
MIN_MATCH = 2  # the rule's m_min: output tokens that must occur in the prediction to align it again
# The L_0 a profile replays: chains whose verify widths (L_0 + 1, doubling as core/limits.py grown_chain
# grows them) are widths a profile times.
FIRST_CHAINS = (1, 3, 7, 11, 15, 23, 31, 47, LONGEST_LOOKUP_CHAIN)
# How the replayed chains grew after a chain accepted whole: the verify width doubling (grown_chain). A
# profile whose replay grew otherwise ("chain-doubles": c -> 2c, profiles from before) is not costed.
GROWTH = "verify-doubles"
LEGACY_GROWTH = "chain-doubles"
MIN_MATCHES = (1, 2, 3, 4, 6, 8, 12)  # the m_min a profile replays
LARGEST_COUNT = 10**9


def rule_lengths(shortest_match: int = 0) -> tuple[int, int]:
    """``(first, min_match)`` by the fixed rule of section 12.6 (ours): ``(15, max(2, shortest_match))``,
    ``shortest_match`` the shortest n-gram of a lookup plan's drafter (0: none, or not a lookup plan). The
    first chain is 15 whatever the plan's own chain: measured in one interleaved run on the pair's edits, a
    prediction drafting 15 after each alignment (a verify of 16, growing to 31 and 63 while it holds) ran
    4.7% faster than one drafting the lookup plan's 63 (docs/planner-math.md section 12.6).

    >>> rule_lengths(12), rule_lengths()
    ((15, 12), (15, 2))
    """
    return FIRST_CHAIN, max(MIN_MATCH, shortest_match)


@dataclass(frozen=True)
class PredictionCandidate:
    """The rounds a prediction drafter at ``first`` / ``min_match`` played over the calibration outputs:
    ``drafted``, sorted ``(draft length, rounds)`` pairs (a round that drafted d tokens verified d + 1; d = 0:
    the prediction had nothing aligned, a plain round), and ``accepted``, the prediction's draft tokens the
    target accepted (OpenAI's ``accepted_prediction_tokens``)."""

    first: int
    min_match: int
    drafted: tuple[tuple[int, int], ...]
    accepted: int

    @property
    def rounds(self) -> int:
        return sum(count for _, count in self.drafted)


@dataclass(frozen=True)
class PredictionCalibration:
    """profile.yaml ``prediction``: ``prompts`` calibration prompts carried a prediction, their greedy
    outputs hold ``tokens`` tokens, a draft call took ``ms_per_call`` on average, and ``candidates`` are
    the replays, one per ``(first, min_match)``, their chains grown by ``growth`` (:data:`GROWTH`)."""

    prompts: int
    tokens: int
    ms_per_call: float
    candidates: tuple[PredictionCandidate, ...]
    growth: str = GROWTH


@dataclass(frozen=True)
class PredictionLengths:
    """plan.yaml ``prediction``: the lengths a client's prediction drafts at under this plan, the time per
    token predicted for them on the calibration outputs (speedup: over the target's T(1)), and what they
    were calibrated on (``prompts``: the label, ``count``: prompts with a prediction, ``tokens``)."""

    first: int
    min_match: int
    ms_per_token: float
    tokens_per_s: float
    speedup: float
    accepted_per_target_forward: float
    calibrated_on: tuple[tuple[str, Any], ...] = ()


def _count(value: Any, where: str, low: int, high: int, error: type[Exception]) -> int:
    try:
        return check_count(value, where, low, high)
    except ValueError as failure:
        raise error(f"{failure}; fix the file or regenerate it") from None


def _positive(value: Any, where: str, error: type[Exception], low: float = 0.0) -> float:
    number = float(value) if not isinstance(value, bool) and isinstance(value, (int, float)) else math.nan
    if not math.isfinite(number) or number < low:
        raise error(f"{where} = {value!r} must be a finite number >= {low:g}; fix the file or regenerate it")
    return number


def _candidate(raw: Any, where: str, error: type[Exception]) -> PredictionCandidate:
    if not isinstance(raw, dict) or not isinstance(raw.get("drafted"), dict):
        raise error(f"{where} must be a mapping with first, min_match, accepted and drafted (a mapping); re-profile")
    drafted = tuple(sorted((_count(length, f"{where}.drafted", 0, LONGEST_LOOKUP_CHAIN, error),
                            _count(rounds, f"{where}.drafted", 0, LARGEST_COUNT, error))
                           for length, rounds in raw["drafted"].items()))
    return PredictionCandidate(_count(raw.get("first"), f"{where}.first", 1, LONGEST_LOOKUP_CHAIN, error),
                               _count(raw.get("min_match"), f"{where}.min_match", 1, LONGEST_LOOKUP_CHAIN, error),
                               drafted, _count(raw.get("accepted", 0), f"{where}.accepted", 0, LARGEST_COUNT, error))


def calibration_from_dict(raw: Any, error: type[Exception]) -> PredictionCalibration | None:
    """profile.yaml's ``prediction`` section (None when absent: profiles from before it, or calibrated on
    prompts without a prediction); ``error`` names the bad field in one line."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise error("prediction must be a mapping with prompts, tokens, ms_per_call and candidates; re-profile")
    candidates = tuple(_candidate(item, f"prediction.candidates[{index}]", error)
                       for index, item in enumerate(raw.get("candidates") or ()))
    growth = raw.get("growth", LEGACY_GROWTH)
    if growth not in (GROWTH, LEGACY_GROWTH):
        raise error(f"prediction.growth = {growth!r} must be {GROWTH!r} or {LEGACY_GROWTH!r}; re-profile")
    return PredictionCalibration(_count(raw.get("prompts", 0), "prediction.prompts", 0, LARGEST_COUNT, error),
                                 _count(raw.get("tokens", 0), "prediction.tokens", 0, LARGEST_COUNT, error),
                                 _positive(raw.get("ms_per_call", 0.0), "prediction.ms_per_call", error), candidates,
                                 growth)


def calibration_to_dict(calibration: PredictionCalibration) -> dict[str, Any]:
    return {"prompts": calibration.prompts, "tokens": calibration.tokens,
            "ms_per_call": round(calibration.ms_per_call, 6), "growth": calibration.growth,
            "candidates": [{"first": c.first, "min_match": c.min_match, "accepted": c.accepted,
                            "drafted": {length: rounds for length, rounds in c.drafted}}
                           for c in calibration.candidates]}


def lengths_from_dict(raw: Any, error: type[Exception]) -> PredictionLengths | None:
    """plan.yaml's ``prediction`` section (None when absent: the runtime keeps :func:`rule_lengths`)."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("predicted"), dict):
        raise error("prediction must be a mapping with first, min_match and predicted; re-run `specplan plan`")
    predicted = raw["predicted"]
    numbers = {key: _positive(predicted.get(key), f"prediction.predicted.{key}", error)
               for key in ("ms_per_token", "tokens_per_s", "speedup", "accepted_per_target_forward")}
    calibrated_on = raw.get("calibrated_on") or {}
    if not isinstance(calibrated_on, dict):
        raise error("prediction.calibrated_on must be a mapping; re-run `specplan plan`")
    return PredictionLengths(_count(raw.get("first"), "prediction.first", 1, LONGEST_LOOKUP_CHAIN, error),
                             _count(raw.get("min_match"), "prediction.min_match", 1, LONGEST_LOOKUP_CHAIN, error),
                             **numbers, calibrated_on=tuple((str(k), v) for k, v in calibrated_on.items()))


def lengths_to_dict(lengths: PredictionLengths) -> dict[str, Any]:
    return {"first": lengths.first, "min_match": lengths.min_match,
            "predicted": {"ms_per_token": round(lengths.ms_per_token, 4), "tokens_per_s": round(lengths.tokens_per_s, 4),
                          "speedup": round(lengths.speedup, 4),
                          "accepted_per_target_forward": round(lengths.accepted_per_target_forward, 4)},
            "calibrated_on": dict(lengths.calibrated_on)}
