"""The torch backend: transformers models in torch (runtime/session.py), dynamic or static caches,
compiled steps, every drafter kind: how its target (a 16-bit or 4-bit variant), its layer-skip views,
model drafters and draft heads load, its context, threads and device."""

from __future__ import annotations

from dataclasses import replace

import torch

from specplan.core.backends import TORCH
from specplan.core.drafter_spec import DrafterSpec
from specplan.core.errors import DrafterSpecError, SpecplanError
from specplan.core.plan import Plan
from specplan.core.profile import DeviceInfo, Profile
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.models.load import DTYPES, LoadedModel, load_model
from specplan.quant.load import load_model_variant
from specplan.runtime.backend import Session
from specplan.runtime.backends.base import Backend
from specplan.runtime.context import model_context
from specplan.runtime.device import describe_device
from specplan.runtime.drafters.head_model import load_head
from specplan.runtime.drafters.layerskip import layer_skip_view, parse_kept_layers
from specplan.runtime.session import ModelSession


class TorchBackend(Backend):
    """Targets and drafters as torch networks; each engine wraps its own session around them."""

    traits = TORCH
    compiles_graphs = True
    runs_transformers_weights = True

    def load_target(self, source: str, dtype: str, device: torch.device, threads: int = 0,
                    exact: bool = True) -> LoadedModel:
        return load_model(source, dtype, str(device))

    def open_target(self, plan: Plan, profile: Profile, device: torch.device, threads: int = 0,
                    sessions=None) -> LoadedModel:
        """The profile's target at its precision (a 4-bit variant through quant/); ``sessions``: slots of
        batched caches that several sequences share (runtime/torch_shared.py)."""
        loaded = load_model_variant(profile.target.source, profile.target.dtype, str(device), quant=profile.target.quant)
        return replace(loaded, sessions=sessions)

    def shared_sessions(self, plan: Plan, profile: Profile, parallel: int, threads: int, flag: str = "--parallel"):
        """Slot sessions of one batched cache per network (runtime/torch_shared.py); a draft head, which reads
        the target's hidden states, runs one sequence at a time."""
        from specplan.core.drafter_spec import parse_drafter_spec
        from specplan.runtime.build import drafter_source
        from specplan.runtime.torch_shared import SharedNetworks

        for stage in plan.stages:
            if parse_drafter_spec(drafter_source(profile, stage.drafter)).kind == "head":
                raise SpecplanError(f"{flag} {parallel}: drafter {stage.drafter!r} is a draft head, which reads the "
                                    f"target's hidden states one sequence at a time; pass {flag} 1")
        return SharedNetworks(parallel)

    def target_session(self, target: LoadedModel, device: torch.device, runtime: RuntimeMode = EAGER) -> Session:
        if target.sessions is not None:  # several sequences decode together (runtime/torch_shared.py)
            return target.sessions.session(target.model)
        return ModelSession(target.model, device, runtime=runtime)

    def target_network(self, target: LoadedModel, device: torch.device) -> torch.nn.Module:
        return target.model

    def drafter_network(self, spec: DrafterSpec, target: LoadedModel,
                        device: torch.device) -> "torch.nn.Module | Session":
        """A view of the target's first layers (``layerskip:``), or the model a ``model:`` drafter names,
        loaded in the target's dtype; DrafterSpecError when its vocabulary is not the target's. Where several
        sequences decode together, a slot session over the network, which every slot shares."""
        if target.sessions is not None:
            network = target.sessions.network(spec.source, lambda: self._drafter_network(spec, target, device))
            return target.sessions.session(network)
        return self._drafter_network(spec, target, device)

    def _drafter_network(self, spec: DrafterSpec, target: LoadedModel, device: torch.device) -> torch.nn.Module:
        if spec.kind == "layerskip":
            return layer_skip_view(target.model, parse_kept_layers(spec.argument, target.model.config.num_hidden_layers))
        loaded = load_model(spec.argument, target.dtype, str(device))
        if loaded.model.config.vocab_size != target.model.config.vocab_size:
            raise DrafterSpecError(
                f"drafter {spec.source!r} has vocabulary {loaded.model.config.vocab_size}, the target "
                f"{target.model.config.vocab_size}; a model drafter must share the target's tokenizer"
            )
        return loaded.model

    def head_network(self, spec: DrafterSpec, target: LoadedModel, device: torch.device) -> torch.nn.Module:
        return load_head(spec.argument, target.model, DTYPES[target.dtype], device)

    def context(self, target: LoadedModel) -> int | None:
        return model_context(target.model.config)

    def describe_device(self, target: LoadedModel, device: torch.device) -> DeviceInfo:
        return describe_device(device)

    def set_threads(self, threads: int) -> None:
        torch.set_num_threads(threads)

    def threads_used(self, session: Session) -> int:
        return torch.get_num_threads()
