"""The hierarchy DP (HSD, Mohri et al., arXiv 2510.19705): the best chain of stages for each model.

Models 0..K sorted by T(1), K = target. L*(i) = best time per committed token of model i's
output with i at the top of a sub-hierarchy (docs/planner-math.md section 4)::

    L*(i) = min( T_i(1),                                          # i decodes alone
                 L_tree(i),                                       # a tree stage verified by i
                 min_{j < i, gamma} (gamma * L*(j) + T_i(gamma + 1)) / E_ji(gamma) )

A retrieval drafter r is only ever the bottom drafter, with L*(r) = its ms per call; its lookup
may find fewer than gamma tokens, so T_i(gamma + 1) is then the expected verify V_ri(gamma)
(planner-math.md section 1; a constant per (r, i, gamma), so the DP and the LP are unchanged). A tree
stage's drafter decodes alone (depth * T_j(width) per round), so a tree can only be the
bottom stage. Lossless drafting makes j's sub-hierarchy emit j's own samples, so E depends
only on the pair (j, i) and optimal substructure holds. With a cap S on the number of
stages, L*_s(i) uses at most s stages and L*_s(i) = min(L*_{s-1}(i), ...); the DP costs
O(S * K * (K + R) * |Gamma|) after the trees. ``gamma * L*(j)`` ignores overshoot (a
sub-hierarchy commits in chunks); :mod:`.simulate` measures that error.

SpecMQuant (arXiv 2505.22179) is one point of this space: a tree verified by a middle model,
then a sequence stage to a 4-bit target whose T(n) grows steeply with n.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specplan.core.plan import Stage, StageShape

from .costs import CostModel


@dataclass(frozen=True)
class Choice:
    """How model i gets its tokens: ``alone``, or a ``sequence`` / ``tree`` stage from ``drafter``.

    ``below``: the stage budget left for a model drafter's own sub-hierarchy.
    """

    kind: str
    drafter: str = ""
    gamma: int = 0
    below: int = 0


@dataclass(frozen=True)
class StageCost:
    """One stage with its per-round costs: ms_per_token = (draft_ms + verify_ms) / accepted."""

    stage: Stage
    draft_ms: float
    verify_ms: float
    accepted: float
    ms_per_token: float


@dataclass(frozen=True)
class HierarchySolution:
    """``values[s][i]`` = L*(i) with at most s stages; ``choices[s][i]`` attains it."""

    values: tuple[dict[str, float], ...]  # [max_stages + 1]
    choices: tuple[dict[str, Choice], ...]  # [max_stages + 1]

    def best(self, model: str) -> float:
        return self.values[-1][model]


def draft_ms_per_token(costs: CostModel, values: dict[str, float], drafter: str) -> float:
    """Time per draft token of ``drafter``: its L* (a model) or ms per call (retrieval)."""
    return costs.call_ms[drafter] if drafter in costs.call_ms else values[drafter]


def stage_cost(costs: CostModel, values_below: dict[str, float], verifier: str, choice: Choice) -> StageCost:
    """Per-round costs of the stage ``choice`` verified by ``verifier`` (drafters at ``values_below``)."""
    if choice.kind == "tree":
        tree = costs.trees[choice.drafter, verifier]
        shape = StageShape("tree", budget=tree.budget, depth=tree.depth, parents=tree.tree.parents,
                           graft=tree.graft, graft_budget=tree.graft_budget)
        stage = Stage(choice.drafter, verifier, shape)
        return StageCost(stage, tree.draft_ms, tree.verify_ms, tree.tree.value, tree.ms_per_token)
    gamma = choice.gamma
    draft = costs.draft_tokens(choice.drafter, verifier, gamma) * draft_ms_per_token(costs, values_below, choice.drafter)
    verify = costs.verify_ms(choice.drafter, verifier, gamma)  # T_i(gamma + 1), or V(gamma) of a lookup
    accepted = costs.accepted[choice.drafter, verifier][gamma]
    stage = Stage(choice.drafter, verifier, StageShape("sequence", gamma=gamma))
    return StageCost(stage, draft, verify, accepted, (draft + verify) / accepted)


def stage_choices(costs: CostModel, verifier: str, below: int) -> list[Choice]:
    """Every one-stage way to feed ``verifier`` whose drafter may itself use ``below`` stages."""
    index = costs.models.index(verifier)
    choices = []
    for drafter in costs.models[:index] + costs.retrieval:
        if (drafter, verifier) in costs.trees:
            choices.append(Choice("tree", drafter))
        for gamma in sorted(costs.accepted.get((drafter, verifier), {})):
            choices.append(Choice("sequence", drafter, gamma, below if drafter in costs.latency else 0))
    return choices


def solve_hierarchy(costs: CostModel, max_stages: int) -> HierarchySolution:
    """The HSD DP over all models of the cost model, with at most ``max_stages`` stages.

    Parameters
    ----------
    costs : CostModel
        From :func:`.costs.build_cost_model`.
    max_stages : int
        Longest chain; 0 means plain decoding only.

    Returns
    -------
    HierarchySolution
        L*_s(i) and the argmin choice for every s <= max_stages and model i.
    """
    return _solve(costs, max_stages, exact=False)


def solve_exact_stages(costs: CostModel, max_stages: int) -> HierarchySolution:
    """The HSD DP (arXiv 2510.19705) with *exactly* s stages: ``values[s][i]`` is the best chain of
    model i that uses s stages (inf when none exists), so ``plan --stages s`` can ask for a
    hierarchy even where a shorter chain is faster. Only a model drafter's sequence stage can sit
    on top of a sub-hierarchy, so for s > 1 the top stage is a sequence from a model drafter."""
    return _solve(costs, max_stages, exact=True)


def _solve(costs: CostModel, max_stages: int, exact: bool) -> HierarchySolution:
    """Level s from level s - 1: at most s stages (a level starts from the one below), or
    exactly s (a level starts from inf and only stacks on an s - 1 stage sub-hierarchy)."""
    values = [{m: costs.latency[m](1) for m in costs.models}]
    choices = [{m: Choice("alone") for m in costs.models}]
    for stages in range(1, max_stages + 1):
        level_values = {m: math.inf for m in costs.models} if exact else dict(values[-1])
        level_choices = {m: Choice("alone") for m in costs.models} if exact else dict(choices[-1])
        for verifier in costs.models:
            for choice in stage_choices(costs, verifier, stages - 1):
                stacked = choice.kind == "sequence" and choice.drafter in costs.latency
                if exact and stages > 1 and not stacked:
                    continue
                cost = stage_cost(costs, values[stages - 1], verifier, choice).ms_per_token
                if cost < level_values[verifier]:
                    level_values[verifier], level_choices[verifier] = cost, choice
        values.append(level_values)
        choices.append(level_choices)
    return HierarchySolution(tuple(values), tuple(choices))


def chain_for(costs: CostModel, solution: HierarchySolution, model: str, stages: int | None = None,
              top: Choice | None = None) -> tuple[StageCost, ...]:
    """The argmin chain of ``model`` with at most ``stages`` stages, bottom to top.

    ``top`` forces the top stage (used to list the alternatives); by default the DP's choice.
    """
    stages = len(solution.values) - 1 if stages is None else stages
    chain: list[StageCost] = []
    choice = solution.choices[stages][model] if top is None else top
    while choice.kind != "alone":
        chain.append(stage_cost(costs, solution.values[choice.below], model, choice))
        if choice.kind == "tree" or choice.drafter not in costs.latency:
            break
        model = choice.drafter
        choice = solution.choices[choice.below][model]
    return tuple(reversed(chain))


def chain_ms_per_token(costs: CostModel, chain: tuple[StageCost, ...], model: str) -> float:
    """ms per committed token of ``model``'s output under ``chain`` (T(1) for no stages)."""
    return chain[-1].ms_per_token if chain else costs.latency[model](1)


def is_finite_chain(chain: tuple[StageCost, ...]) -> bool:
    return all(math.isfinite(stage.ms_per_token) for stage in chain)
