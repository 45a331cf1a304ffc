"""The schedule: the best configuration per batch size, and the batch from which plain decoding wins.

For each batch size ``b`` the profile's ``T(n, b)`` curves (:func:`.batch.batch_view`) go through
the same solver as batch 1 (:func:`.solve.solve_plan`: plain decoding, sequence, tree, hierarchy),
whose ms per token is then the time per committed token of one sequence while ``b`` decode in
lockstep. The whole batch's goodput (SmartSpec, Liu et al., arXiv 2406.14066; planner-math.md
section 11.2) is

    G(c, b) = b * 1000 / L_c(b)        tokens per second, with
    L_c(b)  = (gamma * t_draft(b) + T_verifier(gamma + 1, b)) / E(gamma)   (a sequence stage)

and the tree and hierarchy forms of sections 2 and 4 with every ``T(n)`` read as ``T(n, b)``.
Acceptance does not depend on ``b``; the cost of a forward does. The schedule keeps, per ``b``,
the configuration of highest ``G`` (the lowest ``L``), plain decoding's ``G`` and the batch-1
plan's ``G`` at that batch; the *crossover* is the smallest scheduled batch from which plain
decoding is chosen at every larger scheduled batch.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

from specplan.core.errors import PlanError
from specplan.core.plan import Plan
from specplan.core.profile import Profile, keep_drafters
from specplan.core.schedule import Schedule, ScheduleRow

from .batch import batch_view, scheduled_batches
from .options import PlanOptions
from .simulate import closed_form, plan_stages
from .solve import PlanResult, solve_plan
from .spread import prompt_spread


@dataclass(frozen=True)
class ScheduleResult:
    """The schedule, the solver's full result at each batch (for ``--explain``) and its messages."""

    schedule: Schedule
    results: tuple[tuple[int, PlanResult], ...]
    messages: tuple[str, ...] = ()


def crossover_batch(rows: tuple[ScheduleRow, ...]) -> int | None:
    """The smallest batch from which every row is plain decoding (None if the last row speculates).

    >>> from specplan.core.plan import Stage, StageShape
    >>> chain = (Stage("draft", "target", StageShape("sequence", gamma=2)),)
    >>> rows = tuple(ScheduleRow(b, "", s, 1.0, 1.0, 1.0, 1.0, 1.0) for b, s in ((1, chain), (4, ()), (8, chain), (16, ()), (32, ())))
    >>> crossover_batch(rows)
    16
    """
    crossover = None
    for row in reversed(rows):
        if row.stages:
            break
        crossover = row.batch
    return crossover


def _plan_ms(plan: Plan | None, view: Profile, plain_ms: float) -> float:
    """ms per token of the batch-1 plan's stages on ``view`` (0: cannot be costed there)."""
    if plan is None:
        return 0.0
    if not plan.stages:
        return plain_ms
    if any(stage.shape.kind == "tree" and not stage.shape.parents for stage in plan.stages):
        return 0.0  # a dynamic tree is grown at run time: no closed form
    try:
        return closed_form(plan_stages(plan, view))
    except (PlanError, ValueError, IndexError, ZeroDivisionError):  # no curve at this batch, a missing entry
        return 0.0


def _plain(result: PlanResult):
    """The solver's plain-decoding candidate (every result has one)."""
    return next(candidate for candidate in result.candidates if not candidate.stages)


def _row(batch: int, result: PlanResult, plan_ms: float, best=None) -> ScheduleRow:
    best = best or result.candidates[0]
    plain = _plain(result).ms_per_token
    goodput = batch * 1000.0 / best.ms_per_token
    return ScheduleRow(
        batch=batch, summary=best.summary, stages=best.stages, ms_per_token=best.ms_per_token,
        tokens_per_s=goodput, plain_tokens_per_s=batch * 1000.0 / plain, speedup=plain / best.ms_per_token,
        accepted_per_target_forward=best.accepted_length,
        plan_tokens_per_s=batch * 1000.0 / plan_ms if plan_ms > 0 else 0.0,
    )


# Speculation at a shared load is kept only where it is predicted at least this much faster than plain decoding at
# the low end of its spread over the calibration prompts: the planner's predictions on their own workload ran 3-8%
# above the measured rates on the home EPYC (docs/results.md, "Where the diagonal predictions went wrong":
# predicted/measured 1.03, 1.08), and there a request's guard cannot see what its drafts cost the others.
SHARED_MARGIN = 1.05


def clears_margin(batch: int, plan: Plan, view: Profile, plain_ms: float, speedup: float) -> tuple[bool, float]:
    """(whether ``plan`` may speculate at ``batch``, the speedup that decided it): at batch 1 or for plain decoding
    always (``speedup``); above, where the low end of its speedup over plain decoding (``plain_ms``) on ``view``
    across draws of its calibration prompts (section 9.2; ``speedup``, its point prediction, where no spread can
    be drawn) is at least ``SHARED_MARGIN`` (section 11.5, "Sharing a forward")."""
    if batch < 2 or not plan.stages:
        return True, speedup
    spread = prompt_spread(plan, view, plain_ms)
    low = spread.low if spread is not None else speedup
    return low >= SHARED_MARGIN, low


def paying_together(row: ScheduleRow, result: PlanResult, plan: Plan, view: Profile) -> ScheduleRow:
    """``row``, or plain decoding where ``row`` speculates at a batch above 1 and is not predicted ``SHARED_MARGIN``
    faster than plain decoding there at the low end of its spread over the calibration prompts (section 9.2 on the
    batch's curves; without per-prompt counts, at its point prediction; section 11.5, "Sharing a forward"). A
    request's fallback guard bounds what its own drafts cost it, not what they cost the requests decoded in the
    same forward, so at a shared load speculation is chosen only with a margin. ``plan``: the plan whose
    temperature and horizon the row's stages are costed with."""
    plain = _plain(result)
    clears, low = clears_margin(row.batch, replace(plan, stages=row.stages), view, plain.ms_per_token, row.speedup)
    if clears:
        return row
    reason = f"{row.summary}: {low:.3f}x at the low end, under the {SHARED_MARGIN:.2f}x a shared load asks"
    return replace(_row(row.batch, result, 0.0, plain), summary=f"{plain.summary} ({reason})",
                   plan_tokens_per_s=row.plan_tokens_per_s)


def solve_schedule(profile: Profile, options: PlanOptions | None = None, batches: tuple[int, ...] | None = None,
                   plan: Plan | None = None, source: str | None = None) -> ScheduleResult:
    """The best configuration at every batch size the profile's target was measured (or modelled) at.

    Parameters
    ----------
    profile : Profile
        With ``T(n, b)`` curves (``batch`` on its latency curves); a batch-1 profile gives one row.
    options : PlanOptions, optional
        The search limits, as for :func:`.solve.solve_plan`.
    batches : tuple of int, optional
        A subset of the profile's batch sizes (ValueError naming any it lacks).
    plan : Plan, optional
        The batch-1 plan, costed at every batch (``plan_tokens_per_s``).
    source : str, optional
        ``measured`` | ``roofline`` (default: the profile's ``device.source``).

    Returns
    -------
    ScheduleResult
        Rows by ascending batch and the crossover batch (:func:`crossover_batch`).
    """
    options = options or PlanOptions()
    results, rows, messages = [], [], []
    for batch in scheduled_batches(profile, batches):
        view = batch_view(profile, batch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = solve_plan(view, options)
        messages.extend(f"batch {batch}: {message}" for message in result.warnings if batch > 1)
        plain_ms = _plain(result).ms_per_token
        rows.append(paying_together(_row(batch, result, _plan_ms(plan, view, plain_ms)), result, result.plan, view))
        results.append((batch, result))
    rows = tuple(rows)
    schedule = Schedule(rows, crossover_batch(rows), source or profile.device.source)
    return ScheduleResult(schedule, tuple(results), tuple(dict.fromkeys(messages)))


def with_schedule(plan: Plan, profile: Profile, options: PlanOptions | None = None,
                  batches: tuple[int, ...] | None = None) -> tuple[Plan, ScheduleResult]:
    """``plan`` carrying the schedule of ``profile`` (plan.yaml ``schedule``), and the schedule's result."""
    result = solve_schedule(profile, options, batches, plan)
    return replace(plan, schedule=result.schedule), result


def playable_schedule(plan: Plan, profile: Profile, batches: tuple[int, ...],
                      options: PlanOptions | None = None) -> Schedule:
    """The schedule a runtime built for ``plan`` plays by load (``specplan serve --parallel``;
    planner-math.md section 11.5): batch 1 is the plan; at each larger batch the cheapest of plain
    decoding, the plan's own stages and, for a one-stage chain, its drafter's chain re-solved at that
    batch (the same drafter at another gamma: what the request's engine can switch to between rounds).

    Raises ValueError naming a batch the profile cannot be seen at (:func:`.batch.scheduled_batches`).
    """
    options = options or PlanOptions()
    stages = plan.stages
    chain = len(stages) == 1 and stages[0].shape.kind == "sequence"
    kept = {profile.target.id} | ({stages[0].drafter} if chain else set())
    chain_options = replace(options, shapes=("sequence",), max_stages=min(1, options.max_stages))
    rows = []
    for batch in scheduled_batches(profile, batches):
        if batch == 1:
            rows.append(_plan_row(plan))
            continue
        view = batch_view(profile, batch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = solve_plan(keep_drafters(view, kept), chain_options)
        plain_ms = _plain(result).ms_per_token
        own_ms = _plan_ms(plan, view, plain_ms)
        row = _row(batch, result, own_ms)
        if 0 < own_ms < row.ms_per_token:
            row = replace(row, summary=plan.summary(), stages=stages, ms_per_token=own_ms,
                          tokens_per_s=batch * 1000.0 / own_ms, speedup=plain_ms / own_ms,
                          accepted_per_target_forward=plan.predicted.accepted_per_target_forward)
        rows.append(paying_together(row, result, plan, view))
    rows = tuple(rows)
    return Schedule(rows, crossover_batch(rows), profile.device.source)


def _plan_row(plan: Plan) -> ScheduleRow:
    predicted = plan.predicted
    plain_ms = predicted.ms_per_token * predicted.speedup
    return ScheduleRow(1, plan.summary(), plan.stages, predicted.ms_per_token, predicted.tokens_per_s,
                       1000.0 / plain_ms if plain_ms > 0 else 0.0, predicted.speedup,
                       predicted.accepted_per_target_forward, predicted.tokens_per_s)

