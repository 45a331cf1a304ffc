"""An adaptive plan -> live objects: one target session, a drafter per candidate family, the
live scores of every retrieval drafter in the profile, and the re-planner
(docs/planner-math.md section 12; docs/guide.md "Adaptive plans")."""

from __future__ import annotations

from dataclasses import replace

import torch

from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.errors import PlanError
from specplan.core.plan import Plan, Stage
from specplan.core.profile import Profile
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.models.load import LoadedModel
from specplan.planner.replan import MAX_DEPTH, Replanner
from specplan.runtime.adaptive import AdaptiveEngine, Family, Policy
from specplan.runtime.build import (
    target_session,
    build_drafter, build_drafter_chain, build_tree_drafter, check_stages, eos_ids, stage_shape_arguments,
)
from specplan.runtime.live_acceptance import DrafterScore, LiveAcceptance
from specplan.runtime.backend import Session
from specplan.runtime.stage import StageRunner

RANK_WIDTH = 8  # candidates ranked per node by the live tree replay (the profiler's width)


def live_scores(profile: Profile, target: LoadedModel, device: torch.device) -> LiveAcceptance:
    """A scorer per retrieval drafter of the profile that has an acceptance entry against the target
    (two fresh instances each: the chain replay's and the tree replay's, as the profiler uses)."""
    rows: dict = {}
    scores = []
    for entry in profile.retrieval:
        if not any(a.drafter == entry.id and a.verifier == profile.target.id for a in profile.acceptance):
            continue
        spec = parse_drafter_spec(entry.source)
        chain = build_drafter(spec, target, device).drafter if spec.kind == "ngram" else build_tree_drafter(spec, target, device)
        scores.append(DrafterScore(entry.id, chain, build_tree_drafter(spec, target, device), rows, MAX_DEPTH, RANK_WIDTH))
    return LiveAcceptance(scores, rows, MAX_DEPTH)


def _family(stages: tuple[Stage, ...], session: Session, profile: Profile, target: LoadedModel,
            device: torch.device, stop: set[int], runtime: RuntimeMode) -> Family:
    if not stages:
        return Family(session, None, lambda top: StageRunner(session, None))
    drafter = build_drafter_chain(stages, profile, target, device, stop, runtime)

    def make_runner(top: Stage) -> StageRunner:
        return StageRunner(session, drafter, names=(top.drafter, top.verifier), **stage_shape_arguments(top))

    return Family(session, drafter, make_runner, one_stage=len(stages) == 1)


def build_adaptive_engine(plan: Plan, profile: Profile, target: LoadedModel, device: torch.device,
                          runtime: RuntimeMode = EAGER, policy: Policy | None = None) -> AdaptiveEngine:
    """The engine of an adaptive plan (its ``stages`` must be its first candidate's, which a request starts with)."""
    settings = plan.adaptive
    if settings is None:
        raise PlanError("the plan has no `adaptive` section; solve one with `specplan plan --adaptive`")
    if settings.candidates[0].stages != plan.stages:
        raise PlanError("adaptive.candidates[0] must be the plan's own stages (the configuration a request "
                        "starts with); re-run `specplan plan --adaptive`")
    for candidate in settings.candidates:
        check_stages(replace(plan, stages=candidate.stages), profile)
    session = target_session(target, device, runtime)
    stop = eos_ids(target) | session.eos_ids
    families = [_family(c.stages, session, profile, target, device, stop, runtime) for c in settings.candidates]
    replanner = Replanner(profile, settings, plan.temperature)
    return AdaptiveEngine(session, device, stop, families, settings, replanner, live_scores(profile, target, device),
                          policy)
