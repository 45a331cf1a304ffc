"""Plan quality: did the planner choose well, and did it predict the speed it gets?

Two ratios:

- *choice* = measured tokens/s of the chosen plan / the best measured grid point, on the
  same prompts, interleaved (goal >= 0.95);
- *prediction* = predicted tokens/s / measured decode tokens/s of the chosen plan (goal
  0.9-1.1). The prediction covers steady decoding (docs/planner-math.md section 1), so the
  measured rate here excludes the prefill; the end-to-end ratio is reported beside it.

Both work for every plan the runtime executes: plain decoding, a sequence stage, a tree
stage and a hierarchy, because predictions are keyed by the plan's stages
(:class:`~specplan.bench.grid.PlannerCosts`) and measurements are per target round.

When a goal is missed, the report says which term of the cost model was off. The per-round
time is ``L = (D + V) / E`` (docs/planner-math.md sections 1, 2 and 4: Leviathan et al., arXiv
2211.17192; Sequoia, arXiv 2402.12374; HSD, arXiv 2510.19705) with D: drafting per target
round, everything below the target (for a hierarchy the middle models' own rounds included,
the runtime's ``GenerationResult.draft_seconds``); V: one target forward over the draft
(gamma + 1 tokens, or the tree's nodes); E: accepted tokens per target forward. Each term's
*effect* is the relative change of L when that term alone takes its measured value, and
*other* is the measured time per round spent outside drafting and the target's forwards
(verification, bookkeeping), which the model takes as 0. The verify term is split further:
the profiled T(n) at the widths the runtime actually verified (n-gram drafters often propose
fewer than gamma tokens; a dynamic tree may hold fewer nodes than its budget) against the
measured time of those forwards (the device running slower or faster than profiled).

A prediction is made from the calibration prompts and measured on others, so the measured rate
carries the spread of which prompts ran: on text that is copied all or nothing (code edits), one
prompt's rate ranges over 2x. The report gives the measured decode rate's spread over prompts
(its 95% interval when the prompts are resampled: bench/metrics.py) and says when a missed
prediction lies inside it (docs/results.md, "Where the predictions on edits go wrong").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specplan.bench.grid import CostTerms
from specplan.bench.metrics import SPREAD_LEVEL, Measurement, pooled_rate, spread_of_sums

PREDICTION_GOAL = (0.9, 1.1)
CHOICE_GOAL = 0.95


def prompt_spread(decoded: Sequence[float], seconds: Sequence[float]) -> tuple[float, float] | None:
    """The spread over prompts (bench/metrics.py) of the pooled decode rate sum(decoded) / sum(seconds).

    >>> prompt_spread([100, 100], [2.0, 2.0]), prompt_spread([100], [2.0])
    ((50.0, 50.0), None)
    """
    return spread_of_sums(list(zip(decoded, seconds)), pooled_rate)


def measured_terms(measurements: Sequence[Measurement], latency: Callable[[int], float]) -> dict | None:
    """Measured per-round terms (ms) of a runtime method; ``latency(n)`` is the profiled T_target(n)."""
    rounds = sum(m.target_forwards for m in measurements)
    tokens = sum(m.new_tokens for m in measurements)
    decoded = tokens - sum(m.prefill_tokens for m in measurements)  # a peer's first token is its prefill's
    if not rounds or any(m.decode_seconds is None for m in measurements):
        return None
    decode = sum(m.decode_seconds for m in measurements)
    draft = sum(m.draft_seconds or 0.0 for m in measurements)
    verify = sum(m.verify_forward_seconds or 0.0 for m in measurements)
    widths = [w for m in measurements for w in m.verify_widths]
    spread = prompt_spread([m.new_tokens - m.prefill_tokens for m in measurements],
                           [m.decode_seconds for m in measurements]) or (None, None)
    return {
        "rounds": rounds,
        "draft_ms": 1000.0 * draft / rounds,
        "verify_ms": 1000.0 * verify / rounds,
        "verify_ms_profiled_at_widths": sum(latency(w) for w in widths) / len(widths) if widths else None,
        "mean_verify_width": sum(widths) / len(widths) if widths else None,
        "accepted": tokens / rounds,
        "other_ms": 1000.0 * max(0.0, decode - draft - verify) / rounds,
        "ms_per_token": 1000.0 * decode / decoded if decoded else None,
        "decode_tokens_per_s": decoded / decode if decode > 0 else None,
        "decode_tokens_per_s_low": spread[0],  # the prompt-spread interval (prompt_spread)
        "decode_tokens_per_s_high": spread[1],
        "tokens_per_s": tokens / sum(m.seconds for m in measurements),
    }


def term_effects(predicted: CostTerms, measured: dict) -> list[dict]:
    """Each cost term predicted vs measured, and its effect on ms/token when it alone is replaced;
    [] when the prediction lacks the draft / verify split (a plan none of the solves listed)."""
    if not predicted.complete:
        return []
    D, V, E = predicted.draft_ms, predicted.verify_ms, predicted.accepted
    base = (D + V) / E
    rows = [
        ("draft time per round (ms)", D, measured["draft_ms"], (measured["draft_ms"] + V) / E),
        ("verify time per round (ms)", V, measured["verify_ms"], (D + measured["verify_ms"]) / E),
        ("accepted per target forward", E, measured["accepted"], (D + V) / measured["accepted"]),
        ("other time per round (ms)", 0.0, measured["other_ms"], (D + V + measured["other_ms"]) / E),
    ]
    result = [{"term": term, "predicted": round(p, 4), "measured": round(m, 4),
               "ratio": round(m / p, 4) if p else None, "effect": round(changed / base - 1.0, 4)}
              for term, p, m, changed in rows]
    profiled = measured.get("verify_ms_profiled_at_widths")
    if profiled:
        result.append({"term": "  verify: profiled T(n) at the measured widths (ms)", "predicted": round(V, 4),
                       "measured": round(profiled, 4), "ratio": round(profiled / V, 4),
                       "effect": round((D + profiled) / E / base - 1.0, 4)})
        result.append({"term": "  verify: measured / profiled at those widths", "predicted": 1.0,
                       "measured": round(measured["verify_ms"] / profiled, 4),
                       "ratio": round(measured["verify_ms"] / profiled, 4),
                       "effect": round((D + V * measured["verify_ms"] / profiled) / E / base - 1.0, 4)})
    return result


def worst_term(effects: list[dict]) -> dict | None:
    """The top-level term whose measured value moves ms/token the most (None without terms)."""
    return max((e for e in effects if not e["term"].startswith(" ")), key=lambda e: abs(e["effect"]), default=None)


def _describe(effect: dict | None) -> str:
    if effect is None:
        return "unknown: the planner's per-round terms of this configuration are not known"
    direction = "slower" if effect["effect"] > 0 else "faster"
    return (f"{effect['term'].strip()}: predicted {effect['predicted']:.3g}, measured {effect['measured']:.3g} "
            f"({100 * abs(effect['effect']):.0f}% {direction} per token from this term alone)")


def _spread_note(predicted: CostTerms, measured: dict, quality: dict) -> str:
    """Whether the predicted rate lies inside the measured rate's prompt-spread interval (recorded in ``quality``)."""
    low, high = measured.get("decode_tokens_per_s_low"), measured.get("decode_tokens_per_s_high")
    if low is None or high is None:
        return ""
    inside = low <= predicted.tokens_per_s <= high
    quality.update({"measured_decode_interval": [round(low, 3), round(high, 3)], "predicted_within_prompt_spread": inside})
    where = "inside" if inside else "outside"
    return (f"; the prediction lies {where} the measured rate's {SPREAD_LEVEL:.0%} interval over these prompts "
            f"({low:.1f}-{high:.1f} tok/s, resampling the prompts)"
            + (": which prompts ran can account for the miss" if inside else ""))


def plan_quality(plan_summary: str, predicted: CostTerms | None, plan_measured: dict | None,
                 grid: dict[str, dict], plan_name: str | None, plain: tuple[CostTerms, dict] | None = None) -> dict:
    """The two ratios, their goals, and a verdict naming the cost term that was off.

    ``grid``: point name -> {"predicted": CostTerms, "measured": measured_terms(...)} on the grid
    prompts; ``plan_name``: the plan's point in it (None when the grid did not run it);
    ``plain``: the runtime's plain decoding, predicted and measured, when it ran: if its own
    prediction is off too, the profile's T(n) does not describe this run's device speed.
    """
    quality: dict = {"plan": plan_summary, "prediction_goal": list(PREDICTION_GOAL), "choice_goal": CHOICE_GOAL,
                     "verdict": []}
    if predicted is not None and plan_measured is not None and plan_measured.get("decode_tokens_per_s"):
        ratio = predicted.tokens_per_s / plan_measured["decode_tokens_per_s"]
        effects = term_effects(predicted, plan_measured)
        ok = PREDICTION_GOAL[0] <= ratio <= PREDICTION_GOAL[1]
        quality.update({
            "predicted_tokens_per_s": round(predicted.tokens_per_s, 3),
            "measured_decode_tokens_per_s": round(plan_measured["decode_tokens_per_s"], 3),
            "measured_tokens_per_s": round(plan_measured["tokens_per_s"], 3),
            "predicted_over_measured": round(ratio, 4),
            "predicted_over_measured_end_to_end": round(predicted.tokens_per_s / plan_measured["tokens_per_s"], 4),
            "prediction_ok": ok, "terms": effects,
        })
        line = f"prediction {'met' if ok else 'missed'}: predicted/measured {ratio:.2f} (goal {PREDICTION_GOAL[0]}-{PREDICTION_GOAL[1]})"
        spread = _spread_note(predicted, plan_measured, quality)
        if not ok:
            line += "; the term most off is " + _describe(worst_term(effects)) + spread
        quality["verdict"].append(line)
    if plain is not None and plain[1] is not None and plain[1].get("decode_tokens_per_s"):
        drift = plain[0].tokens_per_s / plain[1]["decode_tokens_per_s"]
        quality["plain_predicted_over_measured"] = round(drift, 4)
        if not PREDICTION_GOAL[0] <= drift <= PREDICTION_GOAL[1]:
            quality["verdict"].append(
                f"device speed: plain decoding, which has no draft or acceptance term, is off too (predicted/measured "
                f"{drift:.2f}): the profile's T(n) does not match this run's machine (other load, another run's profile); "
                "re-profile on a quiet machine before judging the cost model")
    measured = {name: point for name, point in grid.items() if point.get("measured")}
    if plan_name in measured and len(measured) > 1:
        best = max(measured, key=lambda name: measured[name]["measured"]["tokens_per_s"])
        plan_rate = measured[plan_name]["measured"]["tokens_per_s"]
        best_rate = measured[best]["measured"]["tokens_per_s"]
        ok = plan_rate / best_rate >= CHOICE_GOAL
        quality.update({"best_grid_point": best, "best_grid_tokens_per_s": round(best_rate, 3),
                        "plan_grid_tokens_per_s": round(plan_rate, 3),
                        "plan_over_best": round(plan_rate / best_rate, 4), "choice_ok": ok})
        line = (f"choice {'met' if ok else 'missed'}: the plan runs at {plan_rate / best_rate:.2f} of the best measured "
                f"grid point ({best}, {best_rate:.1f} tok/s; goal >= {CHOICE_GOAL})")
        if not ok:
            winner = measured[best]
            effects = term_effects(winner["predicted"], winner["measured"])
            line += (f"; the planner predicted {winner['predicted'].tokens_per_s:.1f} tok/s for {best} against "
                     f"{measured[plan_name]['predicted'].tokens_per_s:.1f} for the plan; for {best} the term most off is "
                     + _describe(worst_term(effects)))
        quality["verdict"].append(line)
    elif not grid:
        quality["verdict"].append("choice not checked: run with --baselines ...,grid to measure the alternatives")
    return quality
