"""plan.yaml's optional ``adaptive`` section: a closed-loop plan (docs/formats.md, docs/guide.md).

An adaptive plan still lists its ``stages`` (the configuration a request starts with, the one
an older specplan runs). ``adaptive`` adds the candidate configurations the runtime may switch
between, and the rule that switches: every ``every`` target rounds, or when a drafter's live
acceptance moved by more than ``threshold``, the runtime re-solves among the candidates with
the posterior acceptance of the request it is decoding (docs/planner-math.md section 11:
SmartSpec, arXiv 2406.14066, for the per-request choice from observed acceptance).

The stage lists are parsed by :mod:`specplan.core.plan` (passed in here as ``parse_stages`` /
``stage_dicts``), so that this module needs nothing of it at import time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specplan.core.errors import PlanError
from specplan.core.limits import MAX_TREE_BUDGET, check_count

if TYPE_CHECKING:
    from specplan.core.plan import Stage

MAX_CANDIDATES = 16  # configurations one adaptive plan may list


@dataclass(frozen=True)
class AdaptiveCandidate:
    """One configuration the runtime may run: its stages (bottom first; () = plain decoding)
    and the planner's prediction for it from the profile's acceptance."""

    stages: tuple["Stage", ...]
    ms_per_token: float


@dataclass(frozen=True)
class AdaptiveSettings:
    """When and among what the runtime re-plans.

    ``every``: re-plan after this many target rounds; ``threshold``: also when some drafter's
    posterior alpha moved by more than this since the last re-plan; ``prior_weight``: the
    profile's acceptance counts as this many rounds (and ranked positions) in each posterior;
    ``margin``: switch only when the best candidate is predicted faster than the running one
    by more than this share; ``max_budget``: the largest tree a re-solve considers.
    """

    candidates: tuple[AdaptiveCandidate, ...]
    every: int = 16
    threshold: float = 0.05
    prior_weight: float = 16.0
    margin: float = 0.02
    max_budget: int = 16

    def __post_init__(self) -> None:
        if not 1 <= len(self.candidates) <= MAX_CANDIDATES:
            raise PlanError(f"adaptive.candidates lists {len(self.candidates)} configurations; give 1 to "
                            f"{MAX_CANDIDATES} (re-run `specplan plan --adaptive`)")
        if self.every < 1:
            raise PlanError(f"adaptive.every = {self.every} must be at least 1 (target rounds between re-plans)")
        for name, value, high in (("threshold", self.threshold, 1.0), ("margin", self.margin, 1.0),
                                  ("prior_weight", self.prior_weight, 1e6)):
            if not (math.isfinite(value) and 0.0 <= value <= high) or (name == "prior_weight" and value <= 0):
                raise PlanError(f"adaptive.{name} = {value!r} is out of range; use a number in "
                                f"{'(0' if name == 'prior_weight' else '[0'}, {high:g}] (fix the plan)")
        if not 2 <= self.max_budget <= MAX_TREE_BUDGET:
            raise PlanError(f"adaptive.max_budget = {self.max_budget} is out of range; use 2 to {MAX_TREE_BUDGET}")


def _number(raw: dict[str, Any], key: str, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlanError(f"adaptive.{key} must be a number, got {value!r}; fix the plan")
    return float(value)


def _integer(raw: dict[str, Any], key: str, default: int, high: int) -> int:
    try:
        return check_count(raw.get(key, default), f"adaptive.{key}", 0, high)
    except ValueError as error:
        raise PlanError(f"{error}; fix the plan") from None


def adaptive_from_dict(raw: Any, parse_stages: Callable[[Any], tuple["Stage", ...]]) -> AdaptiveSettings | None:
    """The ``adaptive`` mapping of a plan (None when absent); ``parse_stages(rows)`` parses one
    candidate's stage list (core/plan.py checks its chain). PlanError names the bad field."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("candidates"), list):
        raise PlanError("adaptive must be a mapping with a `candidates` list; re-run `specplan plan --adaptive`")
    candidates = []
    for index, row in enumerate(raw["candidates"]):
        if not isinstance(row, dict):
            raise PlanError(f"adaptive.candidates[{index}] must be a mapping with `stages` and `ms_per_token`")
        ms = _number(row, "ms_per_token", math.nan)
        if not math.isfinite(ms) or ms <= 0:
            raise PlanError(f"adaptive.candidates[{index}].ms_per_token = {row.get('ms_per_token')!r} must be a "
                            "positive number; re-run `specplan plan --adaptive`")
        candidates.append(AdaptiveCandidate(parse_stages(row.get("stages")), ms))
    return AdaptiveSettings(
        candidates=tuple(candidates),
        every=_integer(raw, "every", 16, 1_000_000),
        threshold=_number(raw, "threshold", 0.05),
        prior_weight=_number(raw, "prior_weight", 16.0),
        margin=_number(raw, "margin", 0.02),
        max_budget=_integer(raw, "max_budget", 16, MAX_TREE_BUDGET),
    )


def adaptive_to_dict(settings: AdaptiveSettings, stage_dicts: Callable[[tuple["Stage", ...]], list[dict]]) -> dict:
    return {
        "every": settings.every,
        "threshold": settings.threshold,
        "prior_weight": settings.prior_weight,
        "margin": settings.margin,
        "max_budget": settings.max_budget,
        "candidates": [{"stages": stage_dicts(candidate.stages), "ms_per_token": round(candidate.ms_per_token, 4)}
                       for candidate in settings.candidates],
    }
