"""Monte-Carlo simulator of the runtime's semantics, to check the closed forms.

A chain of stages, bottom to top. One *round* of a stage: get the draft (bottom: ``gamma``
draft calls, or ``depth`` calls for a tree; above: run the stage below until it has committed
at least ``gamma`` tokens, *accumulate until gamma*), verify it in one forward, and commit
the accepted prefix plus the bonus token. Acceptance is Bernoulli(alpha) per draft token of
a sequence (Leviathan et al., arXiv 2211.17192), or drawn from the measured accepted-length
histogram when the stage has one, and by rank for a tree (the k-th ranked
child is the accepted one with probability accept[k]; Sequoia, arXiv 2402.12374). A bottom
retrieval stage whose lookup may draft fewer than gamma tokens verifies min(D, gamma) + 1, D
drawn from its ``drafted_hist`` (docs/planner-math.md section 1).

The stage below commits in chunks, so it may overshoot gamma. ``overshoot="trim"`` discards
the extra tokens (their cost is wasted); ``"verify"`` verifies all of them. The closed form
``gamma * L*(j)`` (HSD, arXiv 2510.19705) ignores overshoot; by Wald's identity the trim rule
costs L*(j) * E[overshoot] more per round, which the simulator measures.

Estimate: ms per committed token = sum of round times / sum of committed tokens over
independent top-level rounds, with a delta-method confidence interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from specplan.core.errors import PlanError
from specplan.core.parents import depth_and_width
from specplan.core.plan import Plan
from specplan.core.profile import AcceptanceEntry, Profile

from .horizon import horizon_chain
from .latency import latency_table
from .sequence import drafted_distribution, expected_accepted_from_histogram, expected_accepted_length
from .tree_dp import graft_accept, graft_model_width, tree_value

OVERSHOOT_RULES = ("trim", "verify")


@dataclass(frozen=True)
class SimStage:
    """One stage for the simulator.

    ``verify_ms[n]``: T_v(n) of this stage's verifier; ``draft_ms``: bottom stage only, ms of
    one draft call (a token of a sequence, a level of a tree).
    """

    kind: str  # sequence | tree
    verify_ms: tuple[float, ...]  # [max_n + 1], index n
    gamma: int = 0
    alpha: float = 0.0
    parents: tuple[int, ...] = ()
    rank_accept: tuple[float, ...] = ()
    draft_ms: float = 0.0
    accepted_hist: tuple[int, ...] = ()  # [G + 1] sequence: sample A from it when gamma <= G
    drafted_hist: tuple[int, ...] = ()  # [G + 1] bottom retrieval sequence: tokens its lookup drafts, D

    def uses_histogram(self, drafted: int) -> bool:
        return bool(self.accepted_hist) and sum(self.accepted_hist) > 0 and drafted < len(self.accepted_hist)

    def drafts_fewer(self) -> bool:
        """Whether rounds verify min(D, gamma) + 1 tokens, D drawn from ``drafted_hist``."""
        return bool(self.drafted_hist) and sum(self.drafted_hist) > 0 and self.gamma < len(self.drafted_hist)


@dataclass(frozen=True)
class SimulationResult:
    """Simulated ms per token with its interval, and the closed form it checks."""

    ms_per_token: float
    ci_low: float
    ci_high: float
    closed_form: float
    overshoot_tokens: tuple[float, ...]  # [stages] mean extra tokens per draft request
    overshoot_error_ms: float  # ms_per_token - closed_form
    overshoot_rule: str
    rounds: int

    def agrees(self) -> bool:
        """True when the closed form lies inside the confidence interval."""
        return self.ci_low <= self.closed_form <= self.ci_high


def closed_form(stages: Sequence[SimStage], horizon: int | None = None) -> float:
    """L of the chain: bottom (d * t + T(n)) / F or gamma-sequence, then (gamma L + T(gamma+1)) / E up;
    with ``horizon`` the top sequence stage over answers of that many tokens (planner/horizon.py)."""
    level = 0.0
    for index, stage in enumerate(stages):
        if horizon is not None and index == len(stages) - 1 and stage.kind == "sequence":
            return _horizon_level(stage, stage.draft_ms if index == 0 else level, horizon, bottom=index == 0)
        if stage.kind == "tree":
            depth, _ = depth_and_width(stage.parents)
            value = tree_value(stage.parents, stage.rank_accept)
            level = (depth * stage.draft_ms + stage.verify_ms[len(stage.parents)]) / value
            continue
        draft = stage.draft_ms if index == 0 else level
        if stage.uses_histogram(stage.gamma):
            accepted = expected_accepted_from_histogram(stage.accepted_hist, stage.gamma)
        else:
            accepted = expected_accepted_length(stage.gamma, stage.alpha)
        verify = stage.verify_ms[stage.gamma + 1]
        if index == 0 and stage.drafts_fewer():  # V(gamma), planner-math.md section 1
            shares = drafted_distribution(stage.drafted_hist, stage.gamma)
            verify = sum(share * stage.verify_ms[k + 1] for k, share in enumerate(shares))
        level = (stage.gamma * draft + verify) / accepted
    return level


def _horizon_level(stage: SimStage, draft: float, horizon: int, bottom: bool) -> float:
    """The top chain's time per token over a ``horizon``-token answer (docs/planner-math.md section 1)."""
    entry = AcceptanceEntry("draft", "verify", 0.0, stage.alpha, max(len(stage.accepted_hist) - 1, stage.gamma),
                            stage.accepted_hist, drafted_hist=stage.drafted_hist if bottom else ())
    chain = horizon_chain(entry, stage.gamma, horizon, lambda n: stage.verify_ms[n])
    return (chain.drafted * draft + chain.verify_ms) / chain.accepted


class _Runner:
    """Holds the random stream and the overshoot tallies of one simulation."""

    def __init__(self, stages: Sequence[SimStage], rule: str, seed: int):
        self.stages = stages
        self.rule = rule
        self.rng = np.random.default_rng(seed)
        self.buffer = np.empty(0)
        self.position = 0
        self.requests = [0] * len(stages)
        self.overshoot = [0] * len(stages)
        self.children = [self._children(stage) for stage in stages]

    @staticmethod
    def _children(stage: SimStage) -> list[list[int]]:
        children: list[list[int]] = [[] for _ in stage.parents]
        for node, parent in enumerate(stage.parents[1:], start=1):
            children[parent].append(node)
        return children

    def uniform(self) -> float:
        """A uniform number in (0, 1], drawn in blocks."""
        if self.position >= len(self.buffer):
            self.buffer, self.position = 1.0 - self.rng.random(8192), 0
        self.position += 1
        return float(self.buffer[self.position - 1])

    def chain_accepted(self, alpha: float, length: int) -> int:
        """Leading successes among ``length`` Bernoulli(alpha): P(A >= a) = alpha^a."""
        if alpha >= 1.0:
            return length
        if alpha <= 0.0:
            return 0
        return min(length, int(math.log(self.uniform()) / math.log(alpha)))

    def histogram_accepted(self, hist: tuple[int, ...], length: int) -> int:
        """A ~ the histogram (chains of G), truncated to a chain of ``length`` <= G."""
        draw, accepted = self.uniform() * sum(hist), 0
        while accepted < len(hist) - 1 and draw > hist[accepted]:
            draw -= hist[accepted]
            accepted += 1
        return min(accepted, length)

    def tree_accepted(self, level: int) -> int:
        stage, children = self.stages[level], self.children[level]
        node, accepted = 0, 0
        while children[node]:
            draw, rank = self.uniform(), 0
            while rank < len(stage.rank_accept) and draw > stage.rank_accept[rank]:
                draw -= stage.rank_accept[rank]
                rank += 1
            if rank >= len(children[node]):
                break
            node, accepted = children[node][rank], accepted + 1
        return accepted

    def produce(self, level: int, wanted: int) -> tuple[int, float]:
        """Run rounds of stage ``level`` until it has committed at least ``wanted`` tokens."""
        tokens, ms = 0, 0.0
        while tokens < wanted:
            committed, spent = self.round(level)
            tokens, ms = tokens + committed, ms + spent
        return tokens, ms

    def round(self, level: int) -> tuple[int, float]:
        """One round of stage ``level``: (tokens committed, ms spent)."""
        stage = self.stages[level]
        if stage.kind == "tree":
            depth, _ = depth_and_width(stage.parents)
            ms = depth * stage.draft_ms + stage.verify_ms[len(stage.parents)]
            return self.tree_accepted(level) + 1, ms
        verified = None  # tokens drafted into the verify forward, when fewer than requested
        if level == 0:
            drafted, ms = stage.gamma, stage.gamma * stage.draft_ms
            if stage.drafts_fewer():  # D ~ drafted_hist; A is drawn apart, as the closed form's ratio of means allows
                verified = self.histogram_accepted(stage.drafted_hist, stage.gamma)
        else:
            drafted, ms = self.produce(level - 1, stage.gamma)
            self.requests[level] += 1
            self.overshoot[level] += drafted - stage.gamma
            if self.rule == "trim":
                drafted = stage.gamma
        if drafted + 1 >= len(stage.verify_ms):
            raise ValueError(f"verify_ms has no entry for n = {drafted + 1}; pass a longer table")
        ms += stage.verify_ms[(drafted if verified is None else verified) + 1]
        if stage.uses_histogram(drafted):
            return self.histogram_accepted(stage.accepted_hist, drafted) + 1, ms
        return self.chain_accepted(stage.alpha, drafted) + 1, ms


def simulate(stages: Sequence[SimStage], *, rounds: int = 20000, seed: int = 0,
             overshoot: str = "trim", confidence: float = 0.95) -> SimulationResult:
    """Estimate ms per committed token of a chain of stages (bottom to top) by simulation.

    Parameters
    ----------
    stages : sequence of SimStage
        Bottom to top; a tree may only be the bottom stage.
    rounds : int
        Independent top-level rounds.
    seed : int
        Seed of the numpy Generator (same seed, same result).
    overshoot : {"trim", "verify"}
        What a stage does with tokens its sub-hierarchy committed beyond gamma.
    confidence : float
        Two-sided level of the interval.

    Returns
    -------
    SimulationResult
        The estimate, its interval, the closed form and the overshoot it ignored.
    """
    if overshoot not in OVERSHOOT_RULES:
        raise ValueError(f"overshoot must be one of {OVERSHOOT_RULES}, got {overshoot!r}")
    if not stages or any(stage.kind == "tree" for stage in stages[1:]):
        raise ValueError("need at least one stage, and a tree only as the bottom stage")
    runner = _Runner(stages, overshoot, seed)
    samples = np.array([runner.round(len(stages) - 1) for _ in range(rounds)], dtype=float)  # [rounds, 2]
    tokens, ms = samples[:, 0], samples[:, 1]
    estimate = ms.sum() / tokens.sum()
    spread = np.sqrt(np.var(ms - estimate * tokens, ddof=1) / rounds) / tokens.mean()
    half = float(norm.ppf(0.5 + confidence / 2) * spread)
    closed = closed_form(stages)
    overshoot_tokens = tuple(
        runner.overshoot[k] / runner.requests[k] if runner.requests[k] else 0.0 for k in range(len(stages))
    )
    return SimulationResult(
        float(estimate), float(estimate - half), float(estimate + half), closed,
        overshoot_tokens, float(estimate - closed), overshoot, rounds,
    )


def plan_stages(plan: Plan, profile: Profile, context: int | None = None) -> tuple[SimStage, ...]:
    """The simulator's stages for a plan, with latencies and acceptance from the profile.

    Sequence stages sample the accepted length from the entry's histogram when it covers the
    drafted length (as the planner's E does), else Bernoulli(alpha); trees use the rank acceptance
    (with a graft, the extended vector of the drafter's and the retrieval drafter's ranks).

    Raises
    ------
    PlanError
        If the profile lacks a latency curve or acceptance entry the plan needs.
    """
    target_curves = profile.target.latency
    context = context if context is not None else (target_curves[0].context if target_curves else None)
    max_n = 2 + sum(max(stage.shape.gamma, len(stage.shape.parents), stage.shape.budget) for stage in plan.stages)
    result = []
    for index, stage in enumerate(plan.stages):
        entry = profile.acceptance_for(stage.drafter, stage.verifier, plan.temperature)
        verifier = profile.model(stage.verifier)
        table = latency_table(verifier, context, max_n) if verifier is not None else None
        if entry is None or table is None:
            raise PlanError(f"profile lacks acceptance or latency for {stage.drafter} -> {stage.verifier}; re-profile")
        shape = stage.shape
        accept = _rank_accept(profile, stage, entry.rank_accept, plan.temperature)
        width = depth_and_width(shape.parents)[1] if shape.kind == "tree" else 1
        result.append(SimStage(
            kind=shape.kind, verify_ms=table.ms, gamma=shape.gamma, alpha=entry.alpha,
            parents=shape.parents, rank_accept=tuple(accept), accepted_hist=tuple(entry.accepted_hist),
            drafted_hist=tuple(entry.drafted_hist) if index == 0 else (),
            draft_ms=_stage_draft_ms(profile, stage, width, context) if index == 0 else 0.0,
        ))
    return tuple(result)


def _rank_accept(profile: Profile, stage, rank_accept: tuple[float, ...], temperature: float) -> tuple[float, ...]:
    """The drafter's own rank vector, or for a graft stage the extended vector [p_1..p_B, r_1..r_R]
    with B read off the tree (docs/planner-math.md section 3; Graft, arXiv 2605.20104)."""
    shape = stage.shape
    if not shape.graft or not shape.parents:
        return tuple(rank_accept)
    entry = profile.acceptance_for(shape.graft, stage.verifier, temperature)
    if entry is None or not entry.retrieval_rank_accept:
        raise PlanError(f"profile lacks the graft acceptance of {shape.graft} -> {stage.verifier}; re-profile")
    try:
        width = graft_model_width(shape.parents, shape.graft_budget)
    except ValueError as error:
        raise PlanError(f"{error}: a graft's retrieved nodes are the highest-ranked children; fix the plan") from None
    return graft_accept(rank_accept, entry.retrieval_rank_accept, width)


def _stage_draft_ms(profile: Profile, stage, width: int, context: int | None) -> float:
    """One draft call of the bottom stage (plus its graft's retrieval call, as the planner counts it)."""
    ms = _draft_call_ms(profile, stage.drafter, width, context)
    if stage.shape.graft:
        ms += _draft_call_ms(profile, stage.shape.graft, 1, context)
    return ms


def _draft_call_ms(profile: Profile, drafter: str, width: int, context: int | None) -> float:
    retrieval = profile.retrieval_entry(drafter)
    if retrieval is not None:
        return retrieval.ms_per_call
    model = profile.model(drafter)
    table = latency_table(model, context, max(width, 1)) if model is not None else None
    if table is None:
        raise PlanError(f"profile has no latency curve for drafter {drafter!r}; re-profile")
    return table(max(width, 1))


def simulate_plan(plan: Plan, profile: Profile, *, rounds: int = 20000, seed: int = 0,
                  overshoot: str = "trim", context: int | None = None) -> SimulationResult | None:
    """Simulate a plan's stages on its profile; None for plain decoding (nothing to simulate)."""
    if not plan.stages:
        return None
    if any(stage.shape.kind == "tree" and not stage.shape.parents for stage in plan.stages):
        return None  # a dynamic tree is grown at run time; the simulator needs its shape
    return simulate(plan_stages(plan, profile, context), rounds=rounds, seed=seed, overshoot=overshoot)
