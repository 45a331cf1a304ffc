"""The grid: configurations the planner could have chosen, each with the planner's prediction.

Every profiled drafter alone at each gamma of the grid, the plan's alternatives, the plan
itself and plain decoding, as single sequence stages (what ``runtime/build.py`` runs). The
prediction of each point is the planner's own cost model for that configuration
(planner-math.md section 1; Leviathan et al., arXiv 2211.17192)::

    ms/token = (gamma * t_draft + T_target(gamma + 1)) / E(gamma)

with t_draft = T_drafter(1) for a model drafter decoding alone, ms per call for a retrieval
drafter, and E from the profile's accepted-length histogram. Pure: no torch.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from specplan.plan import Plan
from specplan.planner import PlanOptions, solve_plan
from specplan.profile import Profile

GRID_GAMMAS = tuple(range(2, 9))


@dataclass(frozen=True)
class CostTerms:
    """The planner's per-round cost terms of one configuration (one target forward per round)."""

    draft_ms: float  # drafting per round: gamma * t_draft (0 for plain decoding)
    verify_ms: float  # one target forward over gamma + 1 tokens
    accepted: float  # tokens committed per target forward, bonus included
    ms_per_token: float

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 / self.ms_per_token if self.ms_per_token > 0 else 0.0


@dataclass(frozen=True)
class GridPoint:
    """One configuration: ``drafter`` (profile id; None = plain decoding) at draft length ``gamma``."""

    drafter: str | None
    gamma: int
    summary: str
    predicted: CostTerms
    roles: tuple[str, ...]  # of: plan, alternative, grid, plain

    @property
    def name(self) -> str:
        return "plain-runtime" if self.drafter is None else f"{self.drafter}/g{self.gamma}"


def predicted_costs(profile: Profile, temperature: float, gammas: tuple[int, ...]) -> tuple[dict, str]:
    """(drafter or None, gamma) -> CostTerms for plain decoding and every one-stage sequence
    configuration the profile can cost; and the target's id."""
    options = PlanOptions(gammas=tuple(sorted(set(gammas))), shapes=("sequence",), max_stages=1,
                          temperature=temperature)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = solve_plan(profile, options)
    costs = {}
    for candidate in result.candidates:
        terms = CostTerms(candidate.draft_ms, candidate.verify_ms, candidate.accepted_length, candidate.ms_per_token)
        if not candidate.stages:
            costs[None, 0] = terms
        elif len(candidate.stages) == 1 and candidate.stages[0].shape.kind == "sequence":
            costs[candidate.stages[0].drafter, candidate.stages[0].shape.gamma] = terms
    return costs, result.plan.target


def plan_configuration(plan: Plan) -> tuple[str | None, int] | None:
    """(drafter, gamma) of a plain or one-stage sequence plan; None for shapes the grid cannot run."""
    if not plan.stages:
        return None, 0
    if len(plan.stages) == 1 and plan.stages[0].shape.kind == "sequence":
        return plan.stages[0].drafter, plan.stages[0].shape.gamma
    return None


def grid_points(plan: Plan, profile: Profile, gammas: tuple[int, ...] = GRID_GAMMAS,
                drafters: tuple[str, ...] | None = None) -> tuple[list[GridPoint], list[str]]:
    """The points to measure, plan first then plain decoding, and notes on what was left out."""
    notes: list[str] = []
    chosen = plan_configuration(plan)
    wanted = set(gammas)
    if chosen is not None and chosen[0] is not None:
        wanted.add(chosen[1])
    costs, target = predicted_costs(profile, plan.temperature, tuple(sorted(wanted | set(range(1, 9)))))
    alternatives = {a.summary for a in plan.alternatives}
    drafter_ids = profile.drafter_ids() if drafters is None else list(drafters)
    points: dict[tuple[str | None, int], GridPoint] = {}
    for (drafter, gamma), terms in costs.items():
        summary = f"{target} plain decoding" if drafter is None else f"{drafter} -> {target} (sequence gamma {gamma})"
        roles = []
        if chosen == (drafter, gamma):
            roles.append("plan")
        if summary in alternatives:
            roles.append("alternative")
        if drafter is None:
            roles.append("plain")
        elif drafter in drafter_ids and gamma in gammas:
            roles.append("grid")
        if roles:
            points[drafter, gamma] = GridPoint(drafter, gamma, summary, terms, tuple(roles))
    if chosen is None:
        notes.append(f"the plan ({plan.summary()}) has a shape the runtime cannot run yet; the grid omits it")
    for alternative in sorted(alternatives - {p.summary for p in points.values()}):
        notes.append(f"alternative {alternative!r} is not a one-stage sequence the runtime runs: not measured")
    for drafter in drafter_ids:
        if not any(key[0] == drafter for key in points):
            notes.append(f"drafter {drafter!r} has no acceptance entry or latency for the target: not in the grid")
    notes.append("tree shapes are not measured: runtime/build.py runs one-stage sequence plans only in this version")
    order = sorted(points.values(), key=lambda p: ("plan" not in p.roles, "plain" not in p.roles,
                                                   p.drafter or "", p.gamma))
    return order, notes
