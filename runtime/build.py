"""Turn profile entries and plan stages into live objects: models, drafters, the engine."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specplan.core.backends import traits
from specplan.core.drafter_spec import DrafterSpec, parse_drafter_spec
from specplan.core.errors import DrafterSpecError, PlanError
from specplan.core.plan import Plan
from specplan.core.profile import Profile
from specplan.runtime.drafters.cacheback import CacheDrafter
from specplan.runtime.drafters.graft import GraftDrafter
from specplan.runtime.drafters.head import HeadDrafter
from specplan.runtime.drafters.hierarchy import HierarchyDrafter
from specplan.runtime.drafters.model import ModelDrafter
from specplan.runtime.drafters.model_tree import ModelTreeDrafter
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.drafters.ngram_tree import NgramTreeDrafter
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.core.limits import LONGEST_LOOKUP_CHAIN
from specplan.planner.latency import latency_table
from specplan.runtime.fallback import FallbackGuard, GuardSettings
from specplan.runtime.engine import SpeculativeEngine
from specplan.models.load import LoadedModel
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.runtime.backend import Session
from specplan.runtime.backends import backend_for
from specplan.runtime.session import as_session
from specplan.runtime.stage import StageRunner


@dataclass(frozen=True)
class DrafterBuild:
    spec: DrafterSpec
    drafter: object  # a Drafter
    model: torch.nn.Module | None  # the drafter's network (None for retrieval drafters)


def target_session(target: LoadedModel, device: torch.device, runtime: RuntimeMode = EAGER) -> Session:
    """The target's session on its backend: llama.cpp over its GGUF file, or torch over its weights."""
    return backend_for(target.backend).target_session(target, device, runtime)


def _drafter_network(spec: DrafterSpec, target: LoadedModel, device: torch.device) -> "torch.nn.Module | Session":
    """The causal LM a ``layerskip:`` or ``model:`` drafter runs (a llama.cpp session on that backend)."""
    return backend_for(target.backend).drafter_network(spec, target, device)


def build_drafter(spec: DrafterSpec, target: LoadedModel, device: torch.device,
                  runtime: RuntimeMode = EAGER) -> DrafterBuild:
    """A live sequence drafter for ``spec`` proposing for ``target``."""
    if spec.kind == "ngram":
        return DrafterBuild(spec, NgramDrafter(*spec.ngram_sizes), None)
    if spec.kind in ("recycle", "cache"):
        return DrafterBuild(spec, _retrieval_tree_drafter(spec), None)
    if spec.kind == "head":
        head = _head_network(spec, target, device)
        return DrafterBuild(spec, HeadDrafter(spec.id, head, device), head)
    if spec.kind in ("layerskip", "model"):  # on llama.cpp the network is a session
        network = _drafter_network(spec, target, device)
        return DrafterBuild(spec, ModelDrafter(spec.id, network, device, runtime=runtime), network)
    raise DrafterSpecError(f"drafter {spec.source!r} cannot run in this version; use ngram:N, layerskip:K, "
                           "model:MODEL, head:DIR, recycle or cache")


def _head_network(spec: DrafterSpec, target: LoadedModel, device: torch.device) -> torch.nn.Module:
    """The draft head saved in ``spec.argument``, sharing the target's embedding, in the target's dtype
    (refused in one line on a backend that returns no hidden states)."""
    return backend_for(target.backend).head_network(spec, target, device)


def _retrieval_tree_drafter(spec: DrafterSpec):
    if spec.kind == "ngram":
        return NgramTreeDrafter(*spec.ngram_sizes)
    if spec.kind == "recycle":
        return RecycleDrafter()
    if spec.kind == "cache":
        return CacheDrafter()
    raise DrafterSpecError(f"{spec.source!r} is not a retrieval drafter; use ngram:N, recycle or cache")


def build_tree_drafter(spec: DrafterSpec, target: LoadedModel, device: torch.device, network: torch.nn.Module | None = None,
                       runtime: RuntimeMode = EAGER):
    """A live tree drafter for ``spec``; ``network`` reuses an already built drafter model."""
    if spec.is_retrieval:
        return _retrieval_tree_drafter(spec)
    if spec.kind == "head":
        return HeadDrafter(spec.id, network if network is not None else _head_network(spec, target, device), device)
    if spec.kind in ("layerskip", "model"):
        if not traits(target.backend).grows_trees(spec.kind):
            raise DrafterSpecError(f"drafter {spec.source!r} grows trees on the torch backend only; on llama.cpp plan "
                                   "its stage as a sequence, or grow the tree from ngram:N, recycle or cache")
        return ModelTreeDrafter(spec.id, network if network is not None else _drafter_network(spec, target, device), device,
                                runtime=runtime)
    raise DrafterSpecError(f"drafter {spec.source!r} cannot draft trees; use ngram:N, layerskip:K, model:MODEL, head:DIR, "
                           "recycle or cache")


def pad_id(loaded: LoadedModel) -> int:
    """The id that fills padding in a batch: the tokenizer's pad token, else the smallest EOS id (else 0)."""
    pad = loaded.tokenizer.pad_token_id
    return int(pad) if pad is not None else min(eos_ids(loaded), default=0)


def eos_ids(loaded: LoadedModel) -> set[int]:
    """Token ids that end generation: the tokenizer's and the generation config's EOS."""
    ids = set()
    if getattr(loaded.tokenizer, "eos_token_id", None) is not None:
        ids.add(int(loaded.tokenizer.eos_token_id))
    configured = getattr(getattr(loaded.model, "generation_config", None), "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured:
        ids.update(int(v) for v in configured)
    return ids


def drafter_source(profile: Profile, drafter_id: str) -> str:
    """The SPEC a profile recorded for ``drafter_id``; PlanError when the profile lacks it."""
    model = profile.model(drafter_id)
    if model is not None:
        return model.source
    retrieval = profile.retrieval_entry(drafter_id)
    if retrieval is not None:
        return retrieval.source
    raise PlanError(f"plan names drafter {drafter_id!r} but the profile lists no such model; re-run `specplan plan`")


def _bottom_drafter(stage, profile: Profile, target: LoadedModel, device: torch.device, runtime: RuntimeMode):
    """The live drafter of a plan's first stage: a sequence drafter, or a tree drafter (with its graft)."""
    spec = parse_drafter_spec(drafter_source(profile, stage.drafter))
    if stage.shape.kind == "sequence":
        return build_drafter(spec, target, device, runtime).drafter
    drafter = build_tree_drafter(spec, target, device, runtime=runtime)
    if stage.shape.graft:
        graft = parse_drafter_spec(drafter_source(profile, stage.shape.graft))
        if spec.is_retrieval or not graft.is_retrieval:
            raise PlanError(
                f"a graft puts a retrieval drafter's tokens into a model drafter's tree; the plan grafts "
                f"{stage.shape.graft!r} into {stage.drafter!r}. Fix the plan"
            )
        drafter = GraftDrafter(drafter, _retrieval_tree_drafter(graft), stage.shape.graft_budget)
    return drafter


def _check_chain(plan: Plan) -> None:
    """Stage k's verifier is stage k+1's drafter, the last verifier is the target, and only the
    bottom stage may be a tree (a middle model hands sequences up)."""
    for below, above in zip(plan.stages, plan.stages[1:]):
        if below.verifier != above.drafter:
            raise PlanError(f"stage {below.drafter} -> {below.verifier} is followed by {above.drafter} -> "
                            f"{above.verifier}; each verifier must draft the next stage. Fix the plan")
        if above.shape.kind != "sequence":
            raise PlanError(f"stage {above.drafter} -> {above.verifier} is a tree over a middle model's output; "
                            "only the bottom stage may be a tree. Fix the plan")
    if plan.stages[-1].verifier != plan.target:
        raise PlanError(f"the last stage is verified by {plan.stages[-1].verifier!r}, not the target; fix the plan")


def stage_shape_arguments(stage) -> dict:
    """StageRunner / SpeculativeEngine keyword arguments for a stage's draft shape."""
    if stage.shape.kind == "sequence":
        return {"gamma": stage.shape.gamma}
    return {"tree": stage.shape}


def build_drafter_chain(stages, profile: Profile, target: LoadedModel, device: torch.device, stop: set[int],
                        runtime: RuntimeMode = EAGER):
    """The drafter the top stage of ``stages`` (bottom first) verifies with: the bottom drafter, wrapped
    in a :class:`HierarchyDrafter` per middle model (its own stage and KV cache; HSD, arXiv 2510.19705)."""
    drafter = _bottom_drafter(stages[0], profile, target, device, runtime)
    for below in stages[:-1]:
        middle = parse_drafter_spec(drafter_source(profile, below.verifier))
        if middle.is_retrieval or middle.kind == "head":
            kind = "retrieval drafter" if middle.is_retrieval else "draft head"
            raise PlanError(f"{below.verifier!r} verifies a stage but is a {kind}, not a model; fix the plan")
        session = as_session(_drafter_network(middle, target, device), device, runtime)
        runner = StageRunner(session, drafter, names=(below.drafter, below.verifier), **stage_shape_arguments(below))
        drafter = HierarchyDrafter(below.verifier, runner, stop)
    return drafter


def check_stages(plan: Plan, profile: Profile) -> None:
    """The plan's target is the profile's and its stages form a chain into it (PlanError otherwise)."""
    if profile.model(plan.target) is None or profile.target.id != plan.target:
        raise PlanError(f"plan's target {plan.target!r} is not the profile's target; re-run `specplan plan`")
    if plan.stages:
        _check_chain(plan)


def build_engine(plan: Plan, profile: Profile, target: LoadedModel, device: torch.device,
                 runtime: RuntimeMode = EAGER, session: Session | None = None, fallback: bool = True,
                 fixed_chain: bool = False, stop_at_eos: bool = True) -> SpeculativeEngine:
    """The engine that executes ``plan``'s stages on ``target`` (plain decoding when it has none).

    A plan of several stages (bottom first) becomes a chain: every middle model is a
    :class:`HierarchyDrafter` over its own stage and its own KV cache (HSD, arXiv 2510.19705).
    An adaptive plan's other candidates are built by :mod:`specplan.runtime.adaptive_build`.
    ``session``: the target's session to reuse (engines that never run at once may share one).
    ``fallback``: rounds fall back to plain decoding while the plan costs more per token than it,
    both measured in this engine's own rounds (runtime/fallback.py). ``fixed_chain``: a lookup's chain
    keeps the plan's gamma every round (no ``ChainGrowth``; bench's ``plan-fixed-chain``). ``stop_at_eos``
    False: every request decodes its whole budget (a fixed-length throughput measurement).
    """
    check_stages(plan, profile)
    session = session if session is not None else target_session(target, device, runtime)
    stop = eos_ids(target) | session.eos_ids if stop_at_eos else set()
    if not plan.stages:
        return SpeculativeEngine(session, device, stop, runtime=runtime)
    drafter = build_drafter_chain(plan.stages, profile, target, device, stop, runtime)
    top = plan.stages[-1]
    verify_ms = target_verify_ms(profile)  # a lookup chain grows where T(n) / n falls
    guard = fallback_guard(profile) if fallback else None
    return SpeculativeEngine(session, device, stop, drafter, names=(top.drafter, top.verifier), runtime=runtime,
                             guard=guard, verify_ms=verify_ms, fixed_chain=fixed_chain, **stage_shape_arguments(top))


def target_verify_ms(profile: Profile):
    """The profile's T(n) of the target up to the longest lookup chain's verify (None without a curve)."""
    return latency_table(profile.target, None, LONGEST_LOOKUP_CHAIN + 1)


def fallback_guard(profile: Profile) -> FallbackGuard:
    """A fallback guard that measures plain decoding per request and reads the profile's T(n) ratios
    to skip that measurement while the plan wins by far (runtime/fallback.py)."""
    return FallbackGuard(GuardSettings(), verify_ms=target_verify_ms(profile))


def sequence_drafter(engine: SpeculativeEngine):
    """The drafter of ``engine``'s sequence stage, or None (plain decoding, or a tree stage)."""
    return engine.drafter if engine.tree is None and engine.gamma > 0 else None


def prediction_lengths(engine: SpeculativeEngine, plan: Plan | None = None) -> tuple[int, int]:
    """``(first, min_match)`` of a prediction drafted over ``engine``'s plan (docs/planner-math.md
    section 12.6): the plan's ``prediction`` section where it has one (the replayed candidate the planner
    found cheapest, planner/prediction.py); else the fixed rule (core/prediction.py ``rule_lengths``): a
    lookup plan lends its shortest n-gram, other plans give the rule's default."""
    from specplan.core.prediction import rule_lengths

    if plan is not None and plan.prediction is not None:
        return plan.prediction.first, plan.prediction.min_match
    drafter = sequence_drafter(engine)
    if drafter is None or drafter.sessions():
        return rule_lengths()
    return rule_lengths(getattr(drafter, "min_ngram", 0))


def build_prediction_engine(engine: SpeculativeEngine, prediction: list[int], prompt_length: int,
                            guard: FallbackGuard | None = None, plan: Plan | None = None,
                            lengths: tuple[int, int] | None = None) -> SpeculativeEngine:
    """An engine over ``engine``'s target session that drafts from a client's ``prediction`` (token ids
    of the expected output, continuing a prompt of ``prompt_length`` tokens; runtime/drafters/prediction.py)
    at the lengths of :func:`prediction_lengths` and, where the prediction has nothing aligned, from
    ``engine``'s own sequence drafter at its gamma (a tree stage's drafter is not used: the prediction's
    round is a chain). Built per request; no model loads. ``guard``: the fallback guard the rounds play
    under (None: every round drafts; it measures each request afresh, runtime/fallback.py). ``plan``: the
    opened plan, whose ``prediction`` section, where present, sets the lengths; ``lengths``: ``(first,
    min_match)`` given instead (measurements/prediction_ab.py compares them)."""
    from specplan.runtime.drafters.prediction import PredictionDrafter

    plan_drafter = sequence_drafter(engine)
    first, min_match = lengths if lengths is not None else prediction_lengths(engine, plan)
    drafter = PredictionDrafter(prediction, prompt_length, plan_drafter, engine.gamma if plan_drafter else 0,
                                first=first, min_match=min_match)
    return SpeculativeEngine(engine.target, engine.device, engine.eos_ids, drafter, gamma=LONGEST_LOOKUP_CHAIN,
                             names=("prediction", engine.stage.names[1]), runtime=EAGER, guard=guard,
                             fixed_chain=True)  # the prediction chooses its own lengths


def lookup_rows(profile: Profile, plan: Plan):
    """Which schedule rows of other stages an engine of ``plan`` builds and plays by load (runtime/load_schedule.py):
    one stage into the plan's target, drafted by an ``ngram`` lookup without a graft. Such a drafter reads only
    the committed text, so a stage of it over the engine's own target session can take any round."""
    def can_play(stages) -> bool:
        return len(stages) == 1 and stages[0].verifier == plan.target and not stages[0].shape.graft and \
            profile.drafter_kind(stages[0].drafter) == "ngram"
    return can_play


def build_rows_for(engine: SpeculativeEngine, profile: Profile, target: LoadedModel, device: torch.device,
                   runtime: RuntimeMode = EAGER) -> None:
    """Let ``engine`` build the stage of a schedule row :func:`lookup_rows` accepts, over its own target session."""
    def build(stages) -> StageRunner:
        (stage,) = stages
        drafter = build_drafter_chain(stages, profile, target, device, engine.eos_ids, runtime)
        return StageRunner(engine.target, drafter, names=(stage.drafter, stage.verifier), **stage_shape_arguments(stage))
    engine.row_builder = build

