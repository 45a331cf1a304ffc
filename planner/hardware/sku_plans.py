"""Deployment plans per SKU: solve a profile's acceptance against each SKU's roofline latencies.

``plan_for_sku`` turns a measured profile into the SKU's modelled one (:mod:`.sku`), solves
it (every shape and hierarchy by default: a SKU plan is for an engine or a later runtime, not
for this machine) and marks the plan as modelled: ``device.source: roofline`` and
``solver.roofline`` = the SKU and calibration it used, so that ``specplan export`` can rebuild
the same latencies. ``summary_table`` says which shape wins where, and why: how flat the
target's T(n) is (T(64)/T(1)), where it turns compute-bound (the ridge width) and how much of
T(1) is fixed overhead.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, replace
from typing import Any

from specplan.core.plan import Plan
from specplan.core.profile import Profile

from ..options import PlanOptions
from .roofline import Calibration, DeviceRoof, forward_cost, largest_batch, precision_for, ridge_width
from ..schedule import with_schedule
from .sku import model_shape, roofline_profile
from ..solve import PlanResult, solve_plan

SKU_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # the schedule's batch sizes on a SKU, up to its memory


@dataclass(frozen=True)
class SkuPlan:
    """One SKU's plan and the numbers that explain it (target at the plan's context)."""

    sku: str
    result: PlanResult
    target_t1_ms: float
    flatness: float  # T(64) / T(1)
    ridge: int  # smallest n that is compute-bound
    overhead_share: float  # fixed overhead / T(1)
    bound_at_1: str  # memory | compute
    fits: int = 0  # most sequences whose KV caches fit beside the target's weights (planner-math 11.1)


def calibration_record(calibration: Calibration | None) -> dict[str, Any]:
    """The calibration as plain values for ``plan.solver['roofline']``."""
    return asdict(calibration or Calibration())


def calibration_from_record(record: dict[str, Any] | None) -> Calibration:
    """Inverse of :func:`calibration_record` (missing: the datasheet calibration)."""
    if not record:
        return Calibration()
    fields = {k: v for k, v in record.items() if k in Calibration.__annotations__}
    return Calibration(**fields)


def sku_batches(profile: Profile, device: DeviceRoof, options: PlanOptions | None = None,
                wanted: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The schedule's batch sizes on ``device``: ``wanted`` (default :data:`SKU_BATCHES`) up to the
    most sequences whose KV caches fit beside the target's weights (:func:`.roofline.largest_batch`)."""
    options = options or PlanOptions()
    target = profile.target
    context = target.latency[0].context if target.latency else 256
    fits = largest_batch(model_shape(profile, target), precision_for(target.quant, target.dtype), context, device,
                         options.table_size)
    return tuple(batch for batch in (wanted or SKU_BATCHES) if batch == 1 or batch <= fits)


def plan_for_sku(profile: Profile, device: DeviceRoof, options: PlanOptions | None = None,
                 calibration: Calibration | None = None, *, profile_path: str = "",
                 profile_sha256: str = "", batches: tuple[int, ...] | None = None) -> SkuPlan:
    """The plan for ``device`` from ``profile``'s acceptance and the SKU's roofline T(n); with more
    than one of ``batches``, also its schedule per batch size (``plan.schedule``, T(n, b))."""
    options = options or PlanOptions()
    modelled = roofline_profile(profile, device, calibration, batches)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = solve_plan(modelled, options, profile_path=profile_path, profile_sha256=profile_sha256)
    plan: Plan = result.plan
    plan = replace(plan, device={"kind": device.kind, "sku": device.sku, "source": "roofline"},
                   solver={**plan.solver, "roofline": {"sku": device.sku, "calibration": calibration_record(calibration)}})
    if batches is not None and len(batches) > 1:
        plan, _ = with_schedule(plan, modelled, options, batches)
    result = replace(result, plan=plan)
    target = modelled.target
    shape = model_shape(modelled, target)
    precision = precision_for(target.quant, target.dtype)
    context = target.latency[0].context
    one = forward_cost(shape, precision, 1, context, device, calibration)
    wide = forward_cost(shape, precision, 64, context, device, calibration)
    return SkuPlan(device.sku, result, one.ms, wide.ms / one.ms, ridge_width(shape, precision, context, device, calibration),
                   one.overhead_ms / one.ms, one.bound, largest_batch(shape, precision, context, device, options.table_size))


def _best(result: PlanResult, kind: str):
    """The fastest candidate whose top stage has shape ``kind`` (None if there is none)."""
    rows = [c for c in result.candidates if c.stages and c.stages[-1].shape.kind == kind]
    return min(rows, key=lambda c: c.ms_per_token) if rows else None


def why(row: SkuPlan) -> str:
    """Why this shape wins here: how flat T(n) is, and the best tree against the best chain."""
    parts = [f"T(64)/T(1) = {row.flatness:.2f} (compute-bound from n = {row.ridge}; "
             f"{row.overhead_share:.0%} of T(1) is fixed overhead)"]
    tree, chain = _best(row.result, "tree"), _best(row.result, "sequence")
    for label, best in (("best tree", tree), ("best chain", chain)):
        if best is not None:
            parts.append(f"{label} {best.accepted_length:.2f} tokens/forward at {best.ms_per_token:.3f} ms/token")
    if not row.result.plan.stages:
        parts.append("no drafter repays its cost")
    elif tree is not None and chain is not None:
        if tree.ms_per_token < chain.ms_per_token:
            parts.append("extra branches are nearly free to verify, so the tree wins")
        elif row.flatness < 1.5:
            parts.append("verification is cheap, but the measured rank acceptance gives a tree fewer "
                         "tokens per forward than the chain")
        else:
            parts.append("wide verification costs more than extra branches return, so the chain wins")
    return "; ".join(parts)


def summary_table(rows: list[SkuPlan]) -> str:
    """A Markdown table: SKU, chosen configuration, predicted speedup, tok/s, the crossover batch
    (plain decoding wins from it; planner-math.md section 11.2) and why."""
    lines = ["| SKU | configuration | speedup | tokens/s | target T(1) ms | crossover batch | why |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        plan = row.result.plan
        lines.append(f"| {row.sku} | {plan.summary()} | {plan.predicted.speedup:.2f}x | "
                     f"{plan.predicted.tokens_per_s:.1f} | {row.target_t1_ms:.3f} | {crossover_cell(plan)} | {why(row)} |")
    return "\n".join(lines)


def crossover_cell(plan: Plan) -> str:
    """``16``, ``> 256`` (speculation wins at the largest batch modelled) or ``-`` (no schedule)."""
    if plan.schedule is None:
        return "-"
    if plan.schedule.crossover_batch is None:
        return f"> {plan.schedule.rows[-1].batch}"
    return str(plan.schedule.crossover_batch)
