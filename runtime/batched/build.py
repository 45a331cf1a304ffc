"""A plan's configuration at batch ``b`` as a live :class:`BatchedEngine` (docs/guide.md, "Batched runs").

Which stages: the plan's ``schedule`` row for ``b`` (the largest scheduled batch <= ``b``,
planner-math.md section 11.2) when the plan has a schedule, else the plan's own stages; or the
stages a caller names (the bench runs the batch-1 plan at every ``b`` too). The batched runtime
executes plain decoding, one sequence stage whose drafter is ``ngram:N`` (looked up per
sequence) or a drafter model (``model:``, ``layerskip:``; one batched forward per draft token),
a static tree that is a chain counting as the sequence it is, and one tree stage grown per
sequence by a retrieval drafter (``ngram:N``, ``recycle``, ``cache``; runtime/batched/tree.py);
model trees, grafts, hierarchies and draft heads are refused with one line. A drafter model the
runner's own engine already runs is reused, not loaded a second time.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from specplan.core.drafter_spec import DrafterSpec, parse_drafter_spec
from specplan.core.errors import PlanError
from specplan.core.plan import Plan, Stage, StageShape, describe_stages
from specplan.runtime.batched.engine import BatchedEngine
from specplan.runtime.batched.drafters import BatchedModelDrafter, PerSequenceDrafters
from specplan.runtime.batched.tree import BatchedTreeEngine, PerSequenceTreeDrafters
from specplan.runtime.build import (
    build_drafter, build_tree_drafter, check_stages, drafter_source, eos_ids, pad_id,
)
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.runner import PlanRunner
from specplan.runtime.session import ModelSession


def stages_at(plan: Plan, batch: int) -> tuple[tuple[Stage, ...], str]:
    """The stages to run at ``batch`` and where they come from (for the summary line)."""
    if plan.schedule is None:
        return tuple(plan.stages), "the plan (no schedule)"
    row = plan.schedule.row_for(batch)
    return tuple(row.stages), f"the schedule's row for batch {row.batch}"


def as_sequences(stages: tuple[Stage, ...]) -> tuple[Stage, ...]:
    """A static tree that is a chain (every node's parent the node before it) is the sequence stage
    of ``gamma`` = its nodes - 1 (the root is the last committed token); other stages unchanged."""
    converted = []
    for stage in stages:
        parents = stage.shape.parents
        if stage.shape.kind == "tree" and parents and not stage.shape.graft \
                and all(parent == node - 1 for node, parent in enumerate(parents)):
            stage = replace(stage, shape=StageShape("sequence", gamma=len(parents) - 1))
        converted.append(stage)
    return tuple(converted)


def check_batchable(stages: tuple[Stage, ...], plan: Plan) -> None:
    """PlanError unless ``stages`` are plain decoding or one sequence stage into the target."""
    stages = as_sequences(stages)
    if not stages:
        return
    if len(stages) > 1 or stages[0].verifier != plan.target or stages[0].shape.graft:
        raise PlanError(f"the batched runtime runs plain decoding or one stage into the target, not "
                        f"{describe_stages(as_sequences(stages), plan.target)}; run it with --batch 1, or re-plan with "
                        "`specplan plan --batched`")


def build_batched_engine(runner: PlanRunner, batch: int, stages: tuple[Stage, ...] | None = None,
                         stop_at_eos: bool = True) -> BatchedEngine:
    """The batched engine of ``stages`` (default: :func:`stages_at`) on the runner's loaded target
    (``stop_at_eos`` False: every sequence decodes its whole budget, as a throughput measurement wants)."""
    plan, target = runner.plan, runner.target
    if stages is None:
        stages, _ = stages_at(plan, batch)
    stages = as_sequences(stages)
    check_batchable(stages, plan)
    check_stages(plan, runner.profile)
    stop = eos_ids(target) if stop_at_eos else set()
    pad = pad_id(target)
    if not stages:
        return BatchedEngine(target.model, runner.device, stop, pad_id=int(pad))
    stage = stages[0]
    spec = parse_drafter_spec(drafter_source(runner.profile, stage.drafter))
    if stage.shape.kind == "tree" or spec.kind in ("recycle", "cache"):  # a table's chain is its rank-0 tree
        return _tree_engine(runner, stage, spec, stop, int(pad))
    if spec.kind == "ngram":
        drafter = PerSequenceDrafters(lambda: NgramDrafter(*spec.ngram_sizes))
    elif spec.kind in ("model", "layerskip"):
        network = drafter_network(runner, spec)
        drafter = BatchedModelDrafter(stage.drafter, network, runner.device, int(pad))
    else:
        raise PlanError(f"the batched runtime drafts with ngram:N or a drafter model, not {spec.source!r} "
                        f"({stage.drafter}); run it with --batch 1")
    return BatchedEngine(target.model, runner.device, stop, drafter, stage.shape.gamma, int(pad), stage.drafter)


def drafter_network(runner: PlanRunner, spec: DrafterSpec) -> torch.nn.Module:
    """The network of a ``model:`` or ``layerskip:`` drafter: the one the runner's engine already
    runs under that drafter's name (one model session of its own), else a newly built one."""
    engine_drafter = runner.engine.drafter
    for drafter in engine_drafter.drafters() if engine_drafter is not None else ():
        sessions = drafter.sessions()
        if drafter.name == spec.id and len(sessions) == 1 and isinstance(sessions[0], ModelSession):
            return sessions[0].model
    return build_drafter(spec, runner.target, runner.device, runner.runtime).model


def _tree_engine(runner: PlanRunner, stage: Stage, spec, stop: set[int], pad: int) -> BatchedTreeEngine:
    """A tree stage: a retrieval drafter per sequence grows the stage's tree (runtime/batched/tree.py).
    A sequence stage of ``gamma`` grows the chain of ``gamma`` nodes (the drafter's rank-0 chain),
    so a recycling table learns from its sequence's verifier rows there too."""
    if not spec.is_retrieval:
        raise PlanError(f"the batched runtime grows trees from retrieval drafters (ngram:N, recycle, cache), not "
                        f"{spec.source!r} ({stage.drafter}); run it with --batch 1, or re-plan with "
                        "`specplan plan --batched`")
    if stage.shape.kind == "sequence":
        shape = StageShape("tree", parents=tuple(range(-1, stage.shape.gamma)))  # node i's parent is node i - 1
    else:
        shape = stage.shape
    drafters = PerSequenceTreeDrafters(lambda: build_tree_drafter(spec, runner.target, runner.device), shape)
    return BatchedTreeEngine(runner.target.model, runner.device, stop, drafters, shape.max_depth, pad, stage.drafter)
