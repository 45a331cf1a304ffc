"""Re-solving an adaptive plan from a request's live acceptance (docs/planner-math.md section 12.2).

A candidate configuration is a *family*: its drafter chain and stage kinds. Given the
posterior acceptance entries of the drafters the runtime scores (:mod:`.posterior`), each
family gets its best shape and cost with the planner's own formulas:

- plain decoding: ``T_target(1)``;
- one sequence stage ``d -> target``: the best ``gamma`` in ``1..max_depth`` of
  ``(gamma * t_d + T(gamma + 1)) / E(gamma)`` (Leviathan et al., arXiv 2211.17192, section 1);
- one tree stage ``d -> target``: Sequoia's hardware-aware DP tree (arXiv 2402.12374, section
  2.3) over the posterior rank vector, up to ``max_budget`` nodes. The DP is cached by the rank
  vector quantised to ``1 / QUANTUM``, so a posterior that barely moved costs a dictionary look-up
  (1/64 is below the posterior's own standard error, section 12.2); a DP solved at a larger
  budget answers a smaller one (its optimum over more trees is exact, and the bound only says
  the larger trees cannot win);
- anything else (a graft, a hierarchy): the shape the plan fixed, its top stage re-costed with
  the posterior E when the top drafter is scored (the draft cost per token below it is read
  back from the planner's prediction: ``L_below = (L * E_prior(gamma) - T(gamma + 1)) / gamma``),
  else the planner's prediction.

The choice is the cheapest family (ties: the earlier candidate). Pure: no torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from specplan.core.plan import Stage, StageShape
from specplan.core.plan_adaptive import AdaptiveCandidate, AdaptiveSettings
from specplan.core.profile import AcceptanceEntry, Profile

from .latency import LatencyTable, latency_table
from .sequence import expected_accepted, sequence_ms_per_token
from .tree_bound import budget_cap, most_committed
from .tree_dp import TreeChoice, choose_tree

# rank vectors are rounded to 1/QUANTUM before the tree DP (its cache key). The rounding error,
# at most 1/128, is below the posterior's standard error sqrt(p (1 - p) / (16 + n)) (16: the
# prior's weight) for 0.1 <= p <= 0.9 over a request's first 1000 positions (0.0094 at p = 0.9):
# a finer key would re-solve the DP for noise (docs/planner-math.md section 12.2).
QUANTUM = 64
MAX_DEPTH = 8  # longest gamma and deepest tree a re-solve considers (the profile's G)


@dataclass(frozen=True)
class ReplanChoice:
    """The cheapest candidate under the posterior: its index, re-solved stages, ms per token,
    and every candidate's cost (same order as the plan's candidates)."""

    index: int
    stages: tuple[Stage, ...]
    ms_per_token: float
    costs: tuple[float, ...]


class Replanner:
    """Costs an adaptive plan's candidates under posterior acceptance; caches the tree DP."""

    def __init__(self, profile: Profile, settings: AdaptiveSettings, temperature: float = 0.0,
                 context: int | None = None):
        self.profile = profile
        self.settings = settings
        self.temperature = temperature
        self.target = profile.target.id
        size = max(settings.max_budget, 2 * MAX_DEPTH + 2)
        self.latency: dict[str, LatencyTable] = {}
        for model in profile.models:
            table = latency_table(model, context, size)
            if table is not None:
                self.latency[model.id] = table
        self.call_ms = {entry.id: float(entry.ms_per_call) for entry in profile.retrieval}
        self.trees: dict[tuple, tuple[int, TreeChoice | None]] = {}  # (drafter, ranks) -> (budget solved, choice)

    def prior(self, drafter: str) -> AcceptanceEntry | None:
        """The profile's entry for ``drafter -> target`` at the plan's temperature."""
        return self.profile.acceptance_for(drafter, self.target, self.temperature)

    def draft_ms(self, drafter: str, width: int = 1) -> float:
        """One draft call (retrieval) or one forward over ``width`` nodes (a model drafter alone)."""
        if drafter in self.call_ms:
            return self.call_ms[drafter]
        table = self.latency.get(drafter)
        return table(width) if table is not None else math.inf

    def choose(self, entries: Mapping[str, AcceptanceEntry], keep: int | None = None) -> ReplanChoice:
        """The cheapest candidate given the posterior ``entries`` (drafter id -> entry vs the target).

        Families without a tree DP are costed first, then the tree families by their planned cost;
        a tree family's DP only tries the budgets whose floor is below the cheapest cost found so
        far (:mod:`.tree_bound`), which leaves the choice unchanged. A family that cannot win reports
        a cost above the winner's (its floor, or its best tree within the capped budgets), not
        necessarily its own optimum. Candidate ``keep`` (the running one) comes last, bounded by
        ``cheapest / (1 - margin)``: its cost is exact whenever the switching rule keeps it.
        """
        candidates = self.settings.candidates
        order = sorted(range(len(candidates)), key=lambda i: (i == keep, self._solves_tree(candidates[i]),
                                                             candidates[i].ms_per_token, i))
        costed: list[tuple[float, tuple[Stage, ...]] | None] = [None] * len(candidates)
        incumbent = math.inf
        for index in order:
            bound = incumbent
            if index == keep:
                bound = incumbent / (1 - self.settings.margin) if self.settings.margin < 1 else math.inf
            costed[index] = self.cost(candidates[index], entries, bound)
            incumbent = min(incumbent, costed[index][0])
        costs = tuple(ms for ms, _ in costed)
        index = min(range(len(costs)), key=lambda i: (costs[i], i))
        return ReplanChoice(index, costed[index][1], costs[index], costs)

    def _solves_tree(self, candidate: AdaptiveCandidate) -> bool:
        stages = candidate.stages
        return len(stages) == 1 and stages[0].shape.kind == "tree" and not stages[0].shape.graft

    def cost(self, candidate: AdaptiveCandidate, entries: Mapping[str, AcceptanceEntry],
             incumbent: float = math.inf) -> tuple[float, tuple[Stage, ...]]:
        """(ms per token, stages) of one candidate family under ``entries`` (a tree family's DP
        skips the budgets that cannot beat ``incumbent`` ms per token)."""
        stages = candidate.stages
        target = self.latency.get(self.target)
        if target is None:
            return candidate.ms_per_token, stages
        if not stages:
            return target(1), stages
        top = stages[-1]
        entry = entries.get(top.drafter)
        if entry is None:
            return candidate.ms_per_token, stages
        if len(stages) == 1 and not top.shape.graft:
            if top.shape.kind == "sequence":
                return self._sequence(top, entry, target)
            return self._tree(top, entry, target, candidate, incumbent)
        return self._fixed_top(candidate, entry, target), stages

    def _sequence(self, stage: Stage, entry: AcceptanceEntry, target: LatencyTable) -> tuple[float, tuple[Stage, ...]]:
        draft = self.draft_ms(stage.drafter)
        best = min((sequence_ms_per_token(gamma, draft, target(gamma + 1), expected_accepted(entry, gamma)), gamma)
                   for gamma in range(1, MAX_DEPTH + 1))
        return best[0], (Stage(stage.drafter, stage.verifier, StageShape("sequence", gamma=best[1])),)

    def _tree(self, stage: Stage, entry: AcceptanceEntry, target: LatencyTable, candidate: AdaptiveCandidate,
              incumbent: float = math.inf) -> tuple[float, tuple[Stage, ...]]:
        accept = tuple(round(p * QUANTUM) / QUANTUM for p in entry.rank_accept)
        budget = self.settings.max_budget
        if math.isfinite(incumbent) and accept:
            budget = budget_cap(accept, target, incumbent, budget)
            if budget < 2:  # no tree of this drafter beats the incumbent: report the floor
                most = most_committed(accept, self.settings.max_budget)
                return min(target(n) / most[n] for n in range(2, len(most))), candidate.stages
        key = (stage.drafter, accept)
        solved = self.trees.get(key)
        if solved is None or solved[0] < budget:  # a DP solved at a larger budget answers a capped one exactly
            solved = self.trees[key] = (budget, choose_tree(accept, lambda width: self.draft_ms(stage.drafter, width),
                                                            target, budget, min(MAX_DEPTH, budget - 1)))
        choice = solved[1]
        if choice is None or not math.isfinite(choice.ms_per_token):
            return candidate.ms_per_token, candidate.stages
        shape = StageShape("tree", budget=choice.budget, depth=choice.depth, parents=choice.tree.parents)
        return choice.ms_per_token, (Stage(stage.drafter, stage.verifier, shape),)

    def _fixed_top(self, candidate: AdaptiveCandidate, entry: AcceptanceEntry, target: LatencyTable) -> float:
        """A graft or a hierarchy keeps its shape; a sequence top stage is re-costed with the posterior E."""
        top = candidate.stages[-1]
        prior = self.prior(top.drafter)
        if top.shape.kind != "sequence" or prior is None:
            return candidate.ms_per_token
        gamma = top.shape.gamma
        verify = target(gamma + 1)
        below = (candidate.ms_per_token * expected_accepted(prior, gamma) - verify) / gamma
        return sequence_ms_per_token(gamma, max(below, 0.0), verify, expected_accepted(entry, gamma))
