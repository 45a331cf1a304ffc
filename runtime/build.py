"""Turn profile entries and plan stages into live objects: models, drafters, the engine."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specplan.drafter_spec import DrafterSpec, parse_drafter_spec
from specplan.errors import DrafterSpecError, PlanError
from specplan.plan import Plan
from specplan.profile import Profile
from specplan.runtime.drafters.layerskip import layer_skip_view, parse_kept_layers
from specplan.runtime.drafters.model import ModelDrafter
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.models import LoadedModel, load_model


@dataclass(frozen=True)
class DrafterBuild:
    spec: DrafterSpec
    drafter: object  # a Drafter
    model: torch.nn.Module | None  # the drafter's network (None for retrieval drafters)


def build_drafter(spec: DrafterSpec, target: LoadedModel, device: torch.device) -> DrafterBuild:
    """A live drafter for ``spec`` proposing for ``target``."""
    if spec.kind == "ngram":
        return DrafterBuild(spec, NgramDrafter(int(spec.argument)), None)
    if spec.kind == "layerskip":
        kept = parse_kept_layers(spec.argument, target.model.config.num_hidden_layers)
        view = layer_skip_view(target.model, kept)
        return DrafterBuild(spec, ModelDrafter(spec.id, view, device), view)
    if spec.kind == "model":
        loaded = load_model(spec.argument, target.dtype, str(device))
        if loaded.model.config.vocab_size != target.model.config.vocab_size:
            raise DrafterSpecError(
                f"drafter {spec.source!r} has vocabulary {loaded.model.config.vocab_size}, the target "
                f"{target.model.config.vocab_size}; a model drafter must share the target's tokenizer"
            )
        return DrafterBuild(spec, ModelDrafter(spec.id, loaded.model, device), loaded.model)
    raise DrafterSpecError(f"drafter {spec.source!r} cannot run in this version; use ngram:N, layerskip:K or model:MODEL")


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


def build_engine(plan: Plan, profile: Profile, target: LoadedModel, device: torch.device) -> SpeculativeEngine:
    """The engine that executes ``plan`` on ``target`` (plain decoding when it has no stages)."""
    if profile.model(plan.target) is None or profile.target.id != plan.target:
        raise PlanError(f"plan's target {plan.target!r} is not the profile's target; re-run `specplan plan`")
    if not plan.stages:
        return SpeculativeEngine(target.model, device, eos_ids(target))
    if len(plan.stages) > 1 or plan.stages[0].shape.kind != "sequence":
        raise PlanError(
            f"this version runs single-stage sequence plans only; the plan has {plan.summary()!r}. "
            "Re-plan with this version of `specplan plan`"
        )
    stage = plan.stages[0]
    spec = parse_drafter_spec(drafter_source(profile, stage.drafter))
    built = build_drafter(spec, target, device)
    return SpeculativeEngine(target.model, device, eos_ids(target), built.drafter, stage.shape.gamma)
