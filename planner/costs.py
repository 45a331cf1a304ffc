"""The numbers the hierarchy DP reads, gathered from a profile once (docs/planner-math.md section 4).

For every model: its latency table T(n). For every retrieval drafter: ms per call. For every
(drafter, verifier) pair the search may use: E(gamma) for each gamma (histogram or alpha,
arXiv 2211.17192), the expected verify forward V(gamma) of a retrieval drafter whose lookup may
draft fewer than gamma tokens (docs/planner-math.md section 1) and, when trees are allowed, the hardware-aware Sequoia tree (arXiv
2402.12374), or its prune-then-graft version with a retrieval drafter's tokens when that is
cheaper (Graft, arXiv 2605.20104). Missing data skips the candidates that need it, with a message naming it.

Models are ordered by T(1) (then the target after a drafter of equal cost, then id): model j
may draft for model i only if j comes before i. Models after the target are never used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from specplan.core.profile import AcceptanceEntry, Profile

from specplan.core.limits import LONGEST_LOOKUP_CHAIN
from .latency import LatencyTable, latency_table
from .options import PlanOptions
from .horizon import horizon_chain
from .sequence import expected_accepted, expected_verify_ms
from .tree_dp import TreeChoice, choose_graft_tree, choose_tree


@dataclass(frozen=True)
class CostModel:
    """Everything the DP needs, keyed by ids. ``models``: ordered by T(1), ``target`` last."""

    target: str
    models: tuple[str, ...]
    retrieval: tuple[str, ...]
    latency: dict[str, LatencyTable]
    call_ms: dict[str, float]  # retrieval drafter -> ms per draft call
    accepted: dict[tuple[str, str], dict[int, float]]  # (drafter, verifier) -> gamma -> E
    trees: dict[tuple[str, str], TreeChoice]  # (drafter, verifier) -> best tree
    messages: tuple[str, ...] = field(default=())
    # (drafter, verifier) -> gamma -> V(gamma), the verify forward's expected ms where a retrieval
    # drafter's lookup may draft fewer than gamma tokens (planner-math.md section 1); else T_v(gamma + 1)
    expected_verify: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)
    # (drafter, verifier) -> gamma -> draft tokens asked for per round where the chain is costed over a
    # finite answer (planner/horizon.py: shorter near the budget's end); else gamma
    drafted: dict[tuple[str, str], dict[int, float]] = field(default_factory=dict)

    def verify_ms(self, drafter: str, verifier: str, gamma: int) -> float:
        """The verify forward of a ``gamma``-chain stage: V(gamma) when measured, else T_v(gamma + 1)."""
        expected = self.expected_verify.get((drafter, verifier), {}).get(gamma)
        return expected if expected is not None else self.latency[verifier](gamma + 1)

    def draft_tokens(self, drafter: str, verifier: str, gamma: int) -> float:
        """Draft tokens a ``gamma``-chain stage asks for per round: gamma, or gamma_H over a finite answer."""
        return self.drafted.get((drafter, verifier), {}).get(gamma, float(gamma))

    def draft_call(self, drafter: str, width: int) -> float:
        """One draft forward of ``width`` nodes: T_j(width) or the retrieval call."""
        if drafter in self.call_ms:
            return self.call_ms[drafter]
        return self.latency[drafter](width)


def _ordered_models(profile: Profile, options: PlanOptions, messages: list[str]) -> tuple[str, dict[str, LatencyTable]]:
    target = profile.target
    target_curve = target.latency[0] if target.latency else None
    context = options.context if options.context is not None else getattr(target_curve, "context", None)
    tables: dict[str, LatencyTable] = {}
    for model in profile.models:
        if model.role == "variant":
            continue  # another precision of the target, profiled for comparison only (not a drafter)
        table = latency_table(model, context, options.table_size)
        if table is None:
            messages.append(f"model {model.id!r} has no latency curve: skipped (re-profile it to use it)")
            continue
        tables[model.id] = table
    return target.id, tables


def _acceptance(profile: Profile, drafter: str, verifier: str, options: PlanOptions,
                messages: list[str]) -> AcceptanceEntry | None:
    entry = profile.acceptance_for(drafter, verifier, options.temperature)
    if entry is None:
        messages.append(f"no acceptance entry for {drafter} -> {verifier}: that stage is skipped")
    elif abs(entry.temperature - options.temperature) > 1e-9:
        messages.append(
            f"{drafter} -> {verifier}: using acceptance measured at temperature {entry.temperature} "
            f"for temperature {options.temperature}"
        )
    return entry


def _tree(model: CostModel, entry: AcceptanceEntry, options: PlanOptions, messages: list[str]) -> TreeChoice | None:
    drafter, verifier = entry.drafter, entry.verifier
    accept = entry.rank_accept  # the drafter's own ranked children; retrieval_rank_accept is for grafts only
    if not accept:
        messages.append(f"{drafter} -> {verifier} has no rank_accept: its tree stage is skipped")
        return None
    return choose_tree(
        accept,
        lambda width: model.draft_call(drafter, width),
        model.latency[verifier],
        options.max_budget,
        options.max_depth,
    )


def _graft(model: CostModel, profile: Profile, drafter: str, verifier: str, options: PlanOptions,
           plain: TreeChoice | None) -> TreeChoice | None:
    """The best of the model tree ``plain`` and its prune-then-graft trees (Graft, arXiv 2605.20104).

    A retrieval drafter r grafts into ``drafter``'s tree when the profile measured r's
    ``retrieval_rank_accept`` against ``verifier`` with ``drafter``'s siblings present
    (``calibration.graft_siblings``). Per round the drafter forwards the whole shape at each
    depth and r is called once per depth (a conservative count; r costs ~0.05 ms).
    """
    if plain is None or profile.calibration.get("graft_siblings") != drafter or drafter in model.call_ms:
        return plain
    own = profile.acceptance_for(drafter, verifier, options.temperature)
    best = plain
    for retrieval in model.retrieval:
        entry = profile.acceptance_for(retrieval, verifier, options.temperature)
        if own is None or entry is None or not entry.retrieval_rank_accept:
            continue
        choice = choose_graft_tree(
            own.rank_accept, entry.retrieval_rank_accept,
            lambda width, r=retrieval: model.draft_call(drafter, width) + model.call_ms[r],
            model.latency[verifier], options.max_budget, options.max_depth,
        )
        if choice is not None and choice.ms_per_token < best.ms_per_token:
            best = replace(choice, graft=retrieval)
    return best


def pair_gammas(entry: AcceptanceEntry, options: PlanOptions) -> tuple[int, ...]:
    """The chain lengths a pair is costed at: ``options.gammas``, and with ``profiled_gammas`` every
    longer one its histogram measured, up to :data:`~specplan.core.limits.LONGEST_LOOKUP_CHAIN` (a
    lookup profiled at G = 63 may be planned at 63; never a chain read from the constant-rate
    extrapolation alone).

    >>> entry = AcceptanceEntry("ngram-8-3", "target", 0.0, 0.9, 63, tuple([1] * 64))
    >>> pair_gammas(entry, PlanOptions(gammas=(1, 2), profiled_gammas=True))[-1]
    63
    """
    if not options.profiled_gammas:
        return options.gammas
    measured = entry.gamma if entry.accepted_hist and sum(entry.accepted_hist) > 0 else 0
    longer = range(max(options.gammas) + 1, min(measured, LONGEST_LOOKUP_CHAIN) + 1)
    return (*options.gammas, *longer)


def build_cost_model(profile: Profile, options: PlanOptions) -> CostModel:
    """Gather latency tables, E(gamma) and trees for every pair the search may use.

    With ``max_stages <= 1`` only pairs verified by the target are looked at (and only their
    missing data is reported). Raises nothing for missing data; see ``messages``.
    """
    messages: list[str] = []
    target, tables = _ordered_models(profile, options, messages)
    if target not in tables:
        return CostModel(target, (), (), tables, {}, {}, {}, tuple(messages))
    order = sorted(tables, key=lambda m: (tables[m](1), m == target, m))
    models = tuple(order[: order.index(target) + 1])
    for slower in order[len(models):]:
        messages.append(f"model {slower!r} is not faster than the target at T(1): not used as a drafter")
    retrieval = tuple(entry.id for entry in profile.retrieval)
    call_ms = {entry.id: float(entry.ms_per_call) for entry in profile.retrieval}
    model = CostModel(target, models, retrieval, tables, call_ms, {}, {}, ())
    heads = {entry.id for entry in profile.models if entry.source.startswith("head:")}  # draft only: they read a verifier's features
    verifiers = tuple(m for m in models if m not in heads) if options.max_stages >= 2 else (target,)
    for index, verifier in enumerate(models):
        if verifier not in verifiers or options.max_stages < 1:
            continue
        for drafter in models[:index] + retrieval:
            entry = _acceptance(profile, drafter, verifier, options, messages)
            if entry is None:
                continue
            if "sequence" in options.shapes:
                _chains(model, entry, pair_gammas(entry, options), options.horizon if verifier == target else None)
            if "tree" in options.shapes and profile.grows_trees(drafter) and (
                    options.tree_drafters is None or drafter in options.tree_drafters):
                tree = _graft(model, profile, drafter, verifier, options, _tree(model, entry, options, messages))
                if tree is not None and math.isfinite(tree.ms_per_token):
                    model.trees[drafter, verifier] = tree
    return CostModel(target, models, retrieval, tables, call_ms, model.accepted, model.trees, tuple(messages),
                     model.expected_verify, model.drafted)


def _chains(model: CostModel, entry: AcceptanceEntry, gammas: tuple[int, ...], horizon: int | None) -> None:
    """E(gamma) and V(gamma) of a pair's chains (docs/planner-math.md section 1): steady state, or with
    ``horizon`` (the target's stages only) over an answer of that many tokens (planner/horizon.py)."""
    pair, latency = (entry.drafter, entry.verifier), model.latency[entry.verifier]
    if horizon is None:
        model.accepted[pair] = {g: expected_accepted(entry, g) for g in gammas}
        if entry.drafted_hist:
            model.expected_verify[pair] = {g: expected_verify_ms(entry, g, latency) for g in gammas}
        return
    chains = {g: horizon_chain(entry, g, horizon, latency) for g in gammas}
    model.accepted[pair] = {g: chain.accepted for g, chain in chains.items()}
    model.expected_verify[pair] = {g: chain.verify_ms for g, chain in chains.items()}
    model.drafted[pair] = {g: chain.drafted for g, chain in chains.items()}
