"""The grid: configurations the planner could have chosen, each with the planner's prediction.

A grid point is a tuple of plan stages (bottom first; empty = plain decoding), so it can be
any configuration the runtime executes (``runtime/build.py``): one sequence stage, one tree
stage (static parents, a dynamic budget, a graft) or a hierarchy. The points are plain
decoding, the plan itself, the plan's alternatives (matched to the candidates of a solve with
the options ``specplan plan`` uses), every profiled drafter alone as a sequence at each gamma
of the grid, and every drafter alone as a tree at each budget of the grid (the planner's best
tree within that budget; identical trees are measured once).

The prediction of a point is the planner's own per-round cost of its top stage (the stage the
target verifies), from ``solve_plan``'s candidates (docs/planner-math.md sections 1, 2 and 4)::

    sequence (Leviathan et al., arXiv 2211.17192): L = (gamma * t_draft + T_target(gamma + 1)) / E(gamma)
    tree (Sequoia, arXiv 2402.12374):            L = (depth * t_draft(width) + T_target(n)) / F(tree)
    hierarchy (HSD, arXiv 2510.19705):           t_draft = L*(middle), the sub-hierarchy's ms per token

so a hierarchy's draft term holds every round below the target. Pure: no torch.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, replace

from specplan.core.plan import Plan, Stage
from specplan.planner import PlanOptions, solve_plan
from specplan.planner.horizon import plan_horizon
from specplan.planner.options import RUNTIME_MAX_STAGES, RUNTIME_SHAPES
from specplan.planner.solve import Candidate
from specplan.core.profile import Profile

GRID_GAMMAS = tuple(range(2, 9))
GRID_BUDGETS = (4, 8, 16, 32)
# The options of `specplan plan` (planner/options.py runtime_options with its defaults), so
# that the plan's alternatives can be matched to candidates.
PLAN_GAMMAS = tuple(range(1, 9))
PLAN_MAX_BUDGET = 64


@dataclass(frozen=True)
class CostTerms:
    """The planner's per-round cost terms of one configuration (one target forward per round)."""

    draft_ms: float  # drafting per round, everything below the target (0 for plain decoding)
    verify_ms: float  # one target forward over the draft (gamma + 1 tokens, or the tree's nodes)
    accepted: float  # tokens committed per target forward, bonus included
    ms_per_token: float

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 / self.ms_per_token if self.ms_per_token > 0 else 0.0

    @property
    def complete(self) -> bool:
        """Whether every term is known (a plan the solves did not list has only its ms/token and E)."""
        return all(math.isfinite(v) for v in (self.draft_ms, self.verify_ms, self.accepted, self.ms_per_token))


def candidate_terms(candidate: Candidate) -> CostTerms:
    return CostTerms(candidate.draft_ms, candidate.verify_ms, candidate.accepted_length, candidate.ms_per_token)


def point_name(stages: tuple[Stage, ...], detailed: bool = False) -> str:
    """A readable name of a configuration: ``plain-runtime``, ``ngram-3/g4``, ``recycle/tree16>layerskip-26/g2``."""
    return "plain-runtime" if not stages else ">".join(stage.label(detailed) for stage in stages)


@dataclass(frozen=True)
class GridPoint:
    """One configuration: its ``stages`` (bottom first; () = plain decoding) and unique ``name``."""

    stages: tuple[Stage, ...]
    name: str
    summary: str
    predicted: CostTerms
    roles: tuple[str, ...]  # of: plan, alternative, grid, plain

    @property
    def drafter(self) -> str | None:
        """The bottom drafter (None for plain decoding)."""
        return self.stages[0].drafter if self.stages else None

    @property
    def gamma(self) -> int:
        """The top stage's draft length (0 for plain decoding and a tree)."""
        return self.stages[-1].shape.gamma if self.stages else 0


def _solve(profile: Profile, options: PlanOptions) -> tuple[Candidate, ...]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return solve_plan(profile, options).candidates


@dataclass(frozen=True)
class PlannerCosts:
    """The candidates of the planner's solves that the bench draws its predictions from.

    ``runtime``: the solve of ``specplan plan`` (every shape the runtime runs, up to
    ``RUNTIME_MAX_STAGES`` stages); ``sequences``: one-stage sequences at every gamma asked;
    ``trees``: per budget of the grid, the one-stage tree candidates within that budget.
    """

    target: str
    runtime: tuple[Candidate, ...]
    sequences: tuple[Candidate, ...]
    trees: dict[int, tuple[Candidate, ...]]

    def all_candidates(self) -> Iterable[Candidate]:
        yield from self.runtime
        yield from self.sequences
        for rows in self.trees.values():
            yield from rows

    def terms(self, stages: tuple[Stage, ...]) -> CostTerms | None:
        """The predicted terms of exactly these stages, if some solve listed them."""
        return next((candidate_terms(c) for c in self.all_candidates() if c.stages == tuple(stages)), None)

    def alternative(self, summary: str) -> Candidate | None:
        """The candidate a plan's alternative names: the first (best) runtime candidate with its summary,
        as ``planner/solve.py`` ``_alternatives`` picks it."""
        return next((c for c in self.runtime if c.summary == summary), None)

    def sequence_costs(self) -> dict[tuple[str | None, int], CostTerms]:
        """(drafter or None, gamma) -> CostTerms of plain decoding and every one-stage sequence."""
        costs = {}
        for candidate in self.sequences:
            if not candidate.stages:
                costs[None, 0] = candidate_terms(candidate)
            elif len(candidate.stages) == 1 and candidate.stages[0].shape.kind == "sequence":
                costs[candidate.stages[0].drafter, candidate.stages[0].shape.gamma] = candidate_terms(candidate)
        return costs


def planner_costs(profile: Profile, temperature: float, gammas: tuple[int, ...] = GRID_GAMMAS,
                  budgets: tuple[int, ...] = GRID_BUDGETS, horizon: int | None = None) -> PlannerCosts:
    """Solve once with ``specplan plan``'s options, once for sequences, once per tree budget; chains
    over answers of ``horizon`` tokens where the plan was solved so (``plan --horizon``, ``solver.horizon``)."""
    runtime = _solve(profile, PlanOptions(max_budget=PLAN_MAX_BUDGET, gammas=PLAN_GAMMAS, shapes=RUNTIME_SHAPES,
                                          max_stages=RUNTIME_MAX_STAGES, temperature=temperature, profiled_gammas=True,
                                          horizon=horizon))
    sequences = _solve(profile, PlanOptions(gammas=tuple(sorted(set(gammas) | set(PLAN_GAMMAS))), shapes=("sequence",),
                                            max_stages=1, temperature=temperature, profiled_gammas=True,
                                            horizon=horizon))
    trees = {budget: _solve(profile, PlanOptions(max_budget=budget, shapes=("tree",), max_stages=1,
                                                 temperature=temperature))
             for budget in sorted(set(budgets))}
    target = profile.target.id
    return PlannerCosts(target, runtime, sequences, trees)


def predicted_costs(profile: Profile, temperature: float, gammas: tuple[int, ...]) -> tuple[dict, str]:
    """(drafter or None, gamma) -> CostTerms for plain decoding and every one-stage sequence
    configuration the profile can cost; and the target's id (what the transformers peers read)."""
    candidates = _solve(profile, PlanOptions(gammas=tuple(sorted(set(gammas))), shapes=("sequence",), max_stages=1,
                                             temperature=temperature))
    costs = PlannerCosts(profile.target.id, (), candidates, {})
    return costs.sequence_costs(), profile.target.id


def plan_terms(plan: Plan, costs: PlannerCosts) -> CostTerms:
    """The plan's predicted terms: the solves' candidate with its stages, else the plan's own
    prediction (ms/token and E; the draft / verify split unknown, NaN)."""
    terms = costs.terms(plan.stages)
    if terms is not None:
        return terms
    predicted = plan.predicted
    return CostTerms(math.nan, math.nan, predicted.accepted_per_target_forward, predicted.ms_per_token)


def _is_alone(candidate: Candidate, target: str, kind: str) -> bool:
    stages = candidate.stages
    return len(stages) == 1 and stages[0].verifier == target and stages[0].shape.kind == kind


def _collect(plan: Plan, costs: PlannerCosts, gammas: tuple[int, ...], drafter_ids: list[str],
             notes: list[str]) -> dict[tuple[Stage, ...], tuple[CostTerms, list[str]]]:
    """stages -> (predicted terms, roles), in the order first met."""
    entries: dict[tuple[Stage, ...], tuple[CostTerms, list[str]]] = {}

    def add(stages: tuple[Stage, ...], terms: CostTerms, role: str) -> None:
        entry = entries.setdefault(tuple(stages), (terms, []))
        if role not in entry[1]:
            entry[1].append(role)

    add(plan.stages, plan_terms(plan, costs), "plan")
    plain = costs.terms(())
    if plain is not None:
        add((), plain, "plain")
    for alternative in plan.alternatives:
        candidate = costs.alternative(alternative.summary)
        if candidate is None:
            notes.append(f"alternative {alternative.summary!r} is not among the planner's candidates for this "
                         "profile (solved with other options?): not measured")
        else:
            add(candidate.stages, candidate_terms(candidate), "alternative")
    for candidate in costs.sequences:
        if _is_alone(candidate, costs.target, "sequence") and candidate.stages[0].shape.gamma in gammas:
            if candidate.stages[0].drafter in drafter_ids:
                add(candidate.stages, candidate_terms(candidate), "grid")
    for budget in sorted(costs.trees):
        for candidate in costs.trees[budget]:
            if _is_alone(candidate, costs.target, "tree") and candidate.stages[0].drafter in drafter_ids:
                add(candidate.stages, candidate_terms(candidate), "grid")
    return entries


def unique_names(keys: list[tuple[Stage, ...]]) -> dict[tuple[Stage, ...], str]:
    """A readable name per configuration; trees whose short names collide get their depth, then a number."""
    short = {key: point_name(key) for key in keys}
    clashes = {name for name in short.values() if list(short.values()).count(name) > 1}
    names: dict[tuple[Stage, ...], str] = {}
    for key in keys:
        name = point_name(key, detailed=True) if short[key] in clashes else short[key]
        base, number = name, 2
        while name in names.values():
            name, number = f"{base}#{number}", number + 1
        names[key] = name
    return names


def _order(point: GridPoint) -> tuple:
    stages = point.stages
    top = stages[-1].shape if stages else None
    return ("plan" not in point.roles, "plain" not in point.roles, len(stages), point.drafter or "",
            top.kind if top else "", (top.gamma or len(top.parents) or top.budget) if top else 0, point.name)


def grid_points(plan: Plan, profile: Profile, gammas: tuple[int, ...] = GRID_GAMMAS,
                drafters: tuple[str, ...] | None = None, budgets: tuple[int, ...] = GRID_BUDGETS,
                costs: PlannerCosts | None = None) -> tuple[list[GridPoint], list[str]]:
    """The points to measure, plan first then plain decoding, and notes on what was left out."""
    costs = costs or planner_costs(profile, plan.temperature, gammas, budgets, plan_horizon(plan))
    notes: list[str] = []
    drafter_ids = profile.drafter_ids() if drafters is None else list(drafters)
    entries = _collect(plan, costs, tuple(gammas), drafter_ids, notes)
    names = unique_names(list(entries))
    points = [GridPoint(stages, names[stages], replace(plan, stages=stages).summary(), terms, tuple(roles))
              for stages, (terms, roles) in entries.items()]
    if not points[0].predicted.complete:
        notes.append(f"the plan ({plan.summary()}) is not among the planner's candidates for `specplan plan`'s "
                     "default options: its prediction is the plan's own, without the draft / verify split")
    for drafter in drafter_ids:
        if not any(p.drafter == drafter and "grid" in p.roles for p in points):
            notes.append(f"drafter {drafter!r} has no acceptance entry or latency for the target: not in the grid")
    return sorted(points, key=_order), notes
