"""A client's prediction costed as a drafter of its own, and its lengths chosen (docs/planner-math.md section 12.6).

Predicted Outputs is OpenAI's API: a request carries the text it expects back, and
runtime/drafters/prediction.py drafts chains from it: ``L_0`` (``first``) tokens after each
(re)alignment, doubled after a chain accepted whole up to 63, back to ``L_0`` after a rejection (the
growth rule of section 12.5; a dynamic draft length, DISCO arXiv 2405.04304), realigned on a match of
at least ``m_min`` (``min_match``) output tokens. The profile replays that drafter, round by round as
the runtime plays it, over the target's greedy outputs on calibration prompts that carried a
prediction, once per candidate ``(L_0, m_min)`` (profiler/prediction_acceptance.py), and keeps each
candidate's rounds by drafted length. A round that drafted ``d`` tokens costs one draft call and one
target forward of ``d + 1`` tokens (Leviathan et al., arXiv 2211.17192: the verify of a chain), and
every candidate replays the same outputs, so by the renewal-reward argument of section 1

    L(L_0, m_min) = (R * t_call + sum_d rounds[d] * T(d + 1)) / N

with ``R`` rounds, ``t_call`` the measured ms per draft call, ``T`` the target's profiled latency curve
and ``N`` the outputs' tokens: the exact cost of the replayed rounds, the doubling included. The
planner takes the cheapest candidate; a profile without the replay leaves the plan without a
``prediction`` section, and the runtime keeps the fixed rule (core/prediction.py ``rule_lengths``).
"""

from __future__ import annotations

import math

from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.errors import DrafterSpecError
from specplan.core.limits import LONGEST_LOOKUP_CHAIN
from specplan.core.plan import Plan, Stage
from specplan.core.prediction import GROWTH, PredictionCalibration, PredictionCandidate, PredictionLengths, rule_lengths
from specplan.core.profile import Profile

from .latency import LatencyTable, latency_table


def candidate_ms_per_token(candidate: PredictionCandidate, calibration: PredictionCalibration,
                           verify_ms: LatencyTable) -> float:
    """``L`` of one replayed candidate: its rounds' draft calls and verifies over the outputs' tokens
    (inf where a verify width has no cost or nothing was replayed)."""
    if calibration.tokens <= 0:
        return math.inf
    verify = sum(rounds * verify_ms(drafted + 1) for drafted, rounds in candidate.drafted if rounds)
    return (candidate.rounds * calibration.ms_per_call + verify) / calibration.tokens


def costed_candidates(profile: Profile, context: int | None = None) -> list[tuple[float, PredictionCandidate]]:
    """``(ms per token, candidate)`` of every replayed candidate that can be costed, cheapest first (ties:
    the shorter first chain, then the shorter match); [] without a replay or a target curve."""
    calibration = profile.prediction
    verify_ms = latency_table(profile.target, context, LONGEST_LOOKUP_CHAIN + 1)
    if calibration is None or verify_ms is None or calibration.growth != GROWTH:
        return []  # a replay whose chains grew by another rule than the runtime's costs other rounds
    rows = [(candidate_ms_per_token(candidate, calibration, verify_ms), candidate)
            for candidate in calibration.candidates]
    rows = [(ms, candidate) for ms, candidate in rows if math.isfinite(ms) and ms > 0]
    return sorted(rows, key=lambda row: (row[0], row[1].first, row[1].min_match))


def solve_prediction(profile: Profile, context: int | None = None) -> PredictionLengths | None:
    """The lengths a prediction drafts at under any plan of ``profile``: the replayed candidate of least
    ms per token on the target's curve at ``context``; None where the profile replayed none."""
    rows = costed_candidates(profile, context)
    if not rows:
        return None
    ms, best = rows[0]
    plain = latency_table(profile.target, context, 1)(1)
    calibration = profile.prediction
    calibrated_on = (("prompts", str(profile.calibration.get("prompts", ""))), ("count", calibration.prompts),
                     ("tokens", calibration.tokens))
    return PredictionLengths(best.first, best.min_match, ms, 1000.0 / ms, plain / ms,
                             calibration.tokens / best.rounds, calibrated_on)


def rule_for_stages(profile: Profile, stages: tuple[Stage, ...]) -> tuple[int, int]:
    """What the fixed rule gives under ``stages``, as runtime/build.py reads it from the engine: a lookup
    (a retrieval drafter's sequence stage into the target) lends its shortest n-gram."""
    if len(stages) != 1 or stages[0].shape.kind != "sequence":
        return rule_lengths()
    entry = profile.retrieval_entry(stages[0].drafter)
    if entry is None:
        return rule_lengths()
    try:
        spec = parse_drafter_spec(entry.source)
    except DrafterSpecError:
        return rule_lengths()
    shortest = spec.ngram_sizes[1] if spec.kind == "ngram" else 0
    return rule_lengths(shortest)


def prediction_line(plan: Plan, profile: Profile, context: int | None = None) -> str | None:
    """One line on a plan's prediction lengths against the fixed rule's on the same replay (None without them)."""
    lengths = plan.prediction
    if lengths is None:
        if profile.prediction is not None and profile.prediction.growth != GROWTH:
            first, min_match = rule_for_stages(profile, plan.stages)
            return (f"specplan: the profile's replay of a client's prediction grew its chains by an older rule "
                    f"({profile.prediction.growth}), so it is not costed: a prediction drafts by the fixed rule "
                    f"({first} tokens after each alignment on {min_match}); re-profile to choose its lengths")
        return None
    on = dict(lengths.calibrated_on)
    tokens = "token" if lengths.first == 1 else "tokens"
    line = (f"specplan: a client's prediction drafts {lengths.first} {tokens} after each alignment on {lengths.min_match}: "
            f"{lengths.ms_per_token:.2f} ms/token, {lengths.speedup:.2f}x plain decoding on the "
            f"{on.get('count', '?')} calibration prompts that carried one")
    first, min_match = rule_for_stages(profile, plan.stages)
    rule = next((ms for ms, c in costed_candidates(profile, context) if (c.first, c.min_match) == (first, min_match)),
                None)
    if (first, min_match) == (lengths.first, lengths.min_match):
        return line + " (the fixed rule's lengths)"
    if rule is None:
        return line + f" (the fixed rule's {first}, {min_match} was not replayed)"
    return line + f" (the fixed rule's {first}, {min_match}: {rule:.2f} ms/token)"
