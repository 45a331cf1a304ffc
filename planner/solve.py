"""solve_plan: from a profile to the fastest lossless plan, with its alternatives and checks.

The hierarchy DP (HSD, arXiv 2510.19705) over the cost model (Leviathan, arXiv 2211.17192,
for sequence stages; Sequoia, arXiv 2402.12374, for trees) gives L*(target) and its chain;
the LP dual (HiGHS) checks the DP values; every way to feed the target (plain decoding, each
drafter and gamma, each tree, each on top of its drafter's best sub-hierarchy) is a candidate
row, so ``explain`` can show why the winner won.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, replace

from specplan.core.parents import depth_and_width
from specplan.core.plan import Alternative, Plan, Prediction, Stage, describe_stages
from specplan.core.profile import Profile

from .costs import CostModel, build_cost_model
from .hierarchy import HierarchySolution, StageCost, chain_for, solve_exact_stages, solve_hierarchy, stage_choices
from .lp import solve_lp
from .options import PlanOptions
from .prediction import solve_prediction
from .simulate import SimulationResult, simulate_plan
from .spread import prompt_spread
from .validate import NoCandidatesError, PlannerWarning, validate_profile

__all__ = ["Candidate", "PlanOptions", "PlanResult", "plan_for_candidate", "solve_plan"]

ALTERNATIVES = 5
OVERSHOOT_RULE = "trim"  # a sub-hierarchy's tokens beyond gamma are discarded (docs/planner-math.md section 4)
LP_TOLERANCE = 1e-6  # relative gap between the LP and the DP that still counts as agreement


@dataclass(frozen=True)
class Candidate:
    """One way to feed the target: its top stage's per-round costs and ms per token."""

    summary: str
    draft_ms: float  # per verifier round (0 for plain decoding)
    verify_ms: float  # one target forward
    accepted_length: float  # tokens committed per target forward, bonus included
    ms_per_token: float
    stages: tuple[Stage, ...] = ()  # bottom to top; () = plain decoding
    extrapolated: bool = False  # some T(n) it uses lies beyond the profiled widths


@dataclass(frozen=True)
class Floor:
    """What a user gets without specplan (docs/planner-math.md section 9.1): on llama.cpp, llama.cpp's
    own plain decoding measured in the profile (``engine_plain_ms``); elsewhere the target's T(1)."""

    name: str
    ms_per_token: float

    def as_record(self) -> dict:
        return {"name": self.name, "ms_per_token": round(self.ms_per_token, 6)}


def floor_of(profile: Profile, costs: CostModel) -> Floor:
    """The floor of ``profile``'s target: the engine's own plain decoding where measured (or where the
    profile's T(1) is it: llama.cpp's fast numerics, its own settings), else T(1)."""
    engine = profile.target.engine_plain_ms
    if engine > 0:
        return Floor("llama.cpp's own plain decoding", engine)
    plain = costs.latency[costs.target](1)
    engine_floor = profile.backend_traits.engine_floor
    return Floor(engine_floor if engine_floor and not profile.exact else "plain decoding", plain)


# A lookup chain predicted within this share of the floor is chosen over plain decoding (section 9.3): it drafts only
# on a match, the run-time gate declines matches like the ones that did not pay, chain growth lengthens a real copy,
# and the guard plays plain decoding where it loses; plain decoding finds no copy a calibration lacked.
LOOKUP_TIE = 0.02


def is_lookup(profile: Profile, stages: tuple[Stage, ...]) -> bool:
    """One chain stage drafted by an ``ngram`` prompt lookup (no model, no tree)."""
    return len(stages) == 1 and stages[0].shape.kind == "sequence" and profile.drafter_kind(stages[0].drafter) == "ngram"


def lookup_at_tie(rows: tuple[Candidate, ...], floor: Floor, profile: Profile) -> Candidate | None:
    """The fastest lookup chain among ``rows`` (sorted) if it is predicted within ``LOOKUP_TIE`` of the floor."""
    lookup = next((row for row in rows if is_lookup(profile, row.stages)), None)
    return lookup if lookup is not None and lookup.ms_per_token <= floor.ms_per_token * (1.0 + LOOKUP_TIE) else None


def tie_reason(lookup: Candidate, floor: Floor) -> str:
    """One line on why a lookup at a tie is kept over plain decoding (section 9.3)."""
    return (f"{lookup.summary} is predicted at {lookup.ms_per_token:.2f} ms/token, within {LOOKUP_TIE:.0%} of "
            f"{floor.ms_per_token:.2f} for {floor.name}: a lookup drafts only on a match and the run-time guard bounds "
            "what it loses, so it is kept where plain decoding would find no copy")


def plain_reason(rows: tuple[Candidate, ...], floor: Floor) -> str:
    """One line on why a plan is plain decoding: the best draft configuration against the floor."""
    drafted = next((row for row in rows if row.stages), None)
    if drafted is None:
        return "plain decoding: the profile holds no drafter whose stage could be costed"
    return (f"plain decoding: the best draft configuration, {drafted.summary}, is predicted at "
            f"{drafted.ms_per_token:.2f} ms/token, not below {floor.ms_per_token:.2f} for {floor.name}")


@dataclass(frozen=True)
class PlanResult:
    """The plan, a status and message (scipy-style), and every candidate, best first."""

    plan: Plan
    status: str  # optimal | unverified (the LP check disagreed or failed)
    message: str
    candidates: tuple[Candidate, ...]
    warnings: tuple[str, ...] = ()  # skipped candidates, extrapolated latencies
    values: dict[str, float] | None = None  # L*(model) for every model used
    simulation: SimulationResult | None = None


def _extrapolated(costs: CostModel, chain: tuple[StageCost, ...]) -> bool:
    """Whether some T(n) the chain reads (verifier widths, a tree drafter's widest forward) is extrapolated."""
    for cost in chain:
        stage = cost.stage
        width = stage.shape.gamma + 1 if stage.shape.kind == "sequence" else stage.shape.budget
        if costs.latency[stage.verifier].is_extrapolated(width):
            return True
        if stage.shape.kind == "tree" and stage.drafter in costs.latency:
            if costs.latency[stage.drafter].is_extrapolated(depth_and_width(stage.shape.parents)[1]):
                return True
    return False


def _candidate(costs: CostModel, chain: tuple[StageCost, ...]) -> Candidate:
    stages = tuple(cost.stage for cost in chain)
    if not chain:
        plain = costs.latency[costs.target](1)
        return Candidate(describe_stages((), costs.target), 0.0, plain, 1.0, plain)
    top = chain[-1]
    return Candidate(describe_stages(stages, costs.target), top.draft_ms, top.verify_ms, top.accepted,
                     top.ms_per_token, stages, _extrapolated(costs, chain))


def candidates(costs: CostModel, solution: HierarchySolution, max_stages: int) -> tuple[Candidate, ...]:
    """Plain decoding, every top stage of the target over its drafter's best sub-hierarchy, and
    the best chain of every length from 2 stages up (so a hierarchy is listed even when it loses).

    Sorted by ms per token, then fewer stages, then summary; infinite costs are left out. The
    first row's ms per token equals the DP's L*(target).
    """
    rows = [_candidate(costs, ())]
    if max_stages >= 1:
        for choice in stage_choices(costs, costs.target, max_stages - 1):
            rows.append(_candidate(costs, chain_for(costs, solution, costs.target, max_stages, top=choice)))
    exact = solve_exact_stages(costs, max_stages)
    for stages in range(2, max_stages + 1):  # the best chain of each length, even where a shorter one wins
        if math.isfinite(exact.values[stages][costs.target]):
            rows.append(_candidate(costs, chain_for(costs, exact, costs.target, stages)))
    rows = [row for row in rows if math.isfinite(row.ms_per_token)]
    rows = list({row.summary: row for row in rows}.values())
    return tuple(sorted(rows, key=lambda row: (row.ms_per_token, len(row.stages), row.summary)))


def _alternatives(rows: tuple[Candidate, ...]) -> tuple[Alternative, ...]:
    """The next best configurations, one per chain of (drafter, verifier, shape kind)."""
    seen = set()
    result = []
    for row in rows:
        key = tuple((s.drafter, s.verifier, s.shape.kind) for s in row.stages)
        if key in seen:
            continue
        seen.add(key)
        result.append(Alternative(row.summary, row.ms_per_token))
    return tuple(result[1 : 1 + ALTERNATIVES])


def _lp_check(costs: CostModel, solution: HierarchySolution, max_stages: int) -> tuple[bool, float, str]:
    """(agrees, largest relative gap, message) of the LP dual against the DP."""
    lp = solve_lp(costs, max_stages)
    if not lp.success:
        return False, math.inf, f"LP check failed: {lp.message}"
    gap = max(abs(lp.values[m] - solution.best(m)) / solution.best(m) for m in costs.models)
    agrees = gap <= LP_TOLERANCE
    return agrees, gap, "LP agrees with the DP" if agrees else f"LP differs from the DP by {gap:.2e} (relative)"


def _report(messages: list[str]) -> None:
    for message in messages:
        warnings.warn(message, PlannerWarning, stacklevel=3)


def solve_plan(profile: Profile, options: PlanOptions | None = None, *, profile_path: str = "",
               profile_sha256: str = "") -> PlanResult:
    """Choose the fastest lossless configuration for the profile's target.

    Parameters
    ----------
    profile : Profile
        Latency curves and acceptance statistics (validated again here).
    options : PlanOptions, optional
        Limits of the search; ``shapes=("sequence",), max_stages=1`` allows only plain
        decoding or one drafter -> target sequence stage.
    profile_path, profile_sha256 : str
        Recorded in the plan so that ``run`` can check it.

    Returns
    -------
    PlanResult
        The plan (predicted ms per token = the best candidate's), status, message, candidates.

    Raises
    ------
    PlannerInputError
        A probability that is NaN, negative or > 1, or a latency that is not positive.
    NoCandidatesError
        The target has no latency curve, so not even plain decoding can be costed.

    Notes
    -----
    Candidates whose data is missing are skipped with a :class:`PlannerWarning` naming it.
    """
    options = options or PlanOptions()
    start = time.perf_counter()
    validate_profile(profile)
    costs = build_cost_model(profile, options)
    messages = list(costs.messages)
    if costs.target not in costs.latency:
        _report(messages)
        raise NoCandidatesError(
            f"the target {costs.target!r} has no latency curve, so no configuration can be costed; "
            "re-run `specplan profile`"
        )
    solution = solve_hierarchy(costs, options.max_stages)
    rows = candidates(costs, solution, options.max_stages)
    agrees, gap, lp_message = _lp_check(costs, solution, options.max_stages)
    seconds = time.perf_counter() - start
    floor = floor_of(profile, costs)
    best = rows[0]
    if best.stages and best.ms_per_token >= floor.ms_per_token:  # speculation that does not beat the engine
        best = next(row for row in rows if not row.stages)
    tie = lookup_at_tie(rows, floor, profile) if not best.stages and options.lookup_at_tie else None
    best = tie or best
    if best.extrapolated:
        messages.append(f"the chosen plan uses latencies extrapolated beyond the profiled widths: {best.summary}")
    _report(messages)
    plan = _plan(profile, options, best, rows, costs, profile_path, profile_sha256,
                 {"method": "dp", "seconds": round(seconds, 6), "checked_by": "lp",
                  "lp_agrees": agrees, "lp_max_relative_gap": float(gap) if math.isfinite(gap) else -1.0,
                  "overshoot_rule": OVERSHOOT_RULE, "floor": floor.as_record(),
                  **({} if best.stages else {"plain_reason": plain_reason(rows, floor)}),
                  **({} if tie is None else {"lookup_at_tie": tie_reason(tie, floor)}),
                  **({} if options.horizon is None else {"horizon": options.horizon})})
    plan, simulation = _simulated(plan, profile, options)
    spread = prompt_spread(plan, profile, floor.ms_per_token)  # section 9.2
    if spread is not None:
        plan = replace(plan, solver={**plan.solver, "prompt_spread": spread.as_record()})
    status = "optimal" if agrees else "unverified"
    message = f"{best.summary}: {best.ms_per_token:.3f} ms/token; {lp_message}; {len(messages)} warning(s)"
    values = {m: solution.best(m) for m in costs.models}
    return PlanResult(plan, status, message, rows, tuple(messages), values, simulation)


def plan_for_candidate(result: PlanResult, candidate: Candidate) -> Plan:
    """``result``'s plan with ``candidate``'s stages and prediction instead of the best one's
    (e.g. the best hierarchy when a single stage won; the solver's record is kept)."""
    plain = next(row.ms_per_token for row in result.candidates if not row.stages)
    predicted = Prediction(ms_per_token=candidate.ms_per_token, tokens_per_s=1000.0 / candidate.ms_per_token,
                           speedup=plain / candidate.ms_per_token, accepted_per_target_forward=candidate.accepted_length)
    solver = {key: value for key, value in result.plan.solver.items() if key != "simulated"}
    return replace(result.plan, stages=candidate.stages, predicted=predicted,
                   solver={**solver, "chosen": "best candidate with these stages, not the overall best"})


def _simulated(plan: Plan, profile: Profile, options: PlanOptions) -> tuple[Plan, SimulationResult | None]:
    """Simulate the plan when asked (``options.simulation_rounds``); record it in ``solver``."""
    if options.simulation_rounds <= 0:
        return plan, None
    simulation = simulate_plan(plan, profile, rounds=options.simulation_rounds, seed=options.seed,
                               overshoot=OVERSHOOT_RULE, context=options.context)
    if simulation is None:
        return plan, None
    return replace(plan, solver={**plan.solver, "simulated": {
        "ms_per_token": round(simulation.ms_per_token, 6),
        "interval": [round(simulation.ci_low, 6), round(simulation.ci_high, 6)],
        "rounds": simulation.rounds,
        "overshoot_error_ms": round(simulation.overshoot_error_ms, 6),
    }}), simulation


def _plan(profile: Profile, options: PlanOptions, best: Candidate, rows: tuple[Candidate, ...],
          costs: CostModel, profile_path: str, profile_sha256: str, solver: dict) -> Plan:
    plain = costs.latency[costs.target](1)
    predicted = Prediction(
        ms_per_token=best.ms_per_token,
        tokens_per_s=1000.0 / best.ms_per_token,
        speedup=plain / best.ms_per_token,
        accepted_per_target_forward=best.accepted_length,
    )
    return Plan(
        profile_path=str(profile_path),
        profile_sha256=str(profile_sha256),
        device={"kind": profile.device.kind, "sku": profile.device.sku},
        target=costs.target,
        temperature=float(options.temperature),
        stages=best.stages,
        predicted=predicted,
        alternatives=_alternatives(rows),
        solver=solver,
        prediction=solve_prediction(profile, options.context),  # apart from the stages (section 12.6)
    )
