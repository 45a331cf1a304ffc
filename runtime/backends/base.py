"""The interface of a runtime backend: what the runtime and the layers above it ask of one (loading the
target and the drafters, its sessions, their context, the device it measured on, its threads), so that
none of them compares a backend's name. Its traits (core/backends.py) are the data the planner reads."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from specplan.core.backends import BackendTraits
from specplan.core.drafter_spec import DrafterSpec
from specplan.core.plan import Plan
from specplan.core.profile import DeviceInfo, Profile
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.models.load import LoadedModel
from specplan.runtime.backend import Session


class Backend(ABC):
    """One runtime backend; :func:`specplan.runtime.backends.backend_for` gives the one a name stands for."""

    traits: BackendTraits
    shares_target_session = False  # plain decoding and the bench's other engines reuse the target's session
    reuses_graph_per_shape = False  # a decode right after one of the same width skips building its graph
    compiles_graphs = False  # a compiled runtime compiles graphs for its models before anything is timed
    runs_transformers_weights = False  # the transformers peers (hf-assisted, hf-lookup) decode the weights it runs
    rounding_note = ""  # why its verified output may part from plain decoding, for the bench's notes ("": its dtype's)
    profile_note = ""  # the line `specplan profile` prints before the target loads ("": none)

    @property
    def name(self) -> str:
        return self.traits.name

    @abstractmethod
    def load_target(self, source: str, dtype: str, device: torch.device, threads: int = 0,
                    exact: bool = True) -> LoadedModel:
        """MODEL ``source`` as `specplan profile` measures it on this backend (``threads`` and ``exact``: the
        kernels' settings, where it takes them)."""

    @abstractmethod
    def open_target(self, plan: Plan, profile: Profile, device: torch.device, threads: int = 0,
                    sessions=None) -> LoadedModel:
        """The profile's target as ``plan`` runs it (``sessions``: a shared session source, where it has them)."""

    def for_plan(self, target: LoadedModel, plan: Plan, profile: Profile) -> LoadedModel:
        """``target``, loaded for another plan, as ``plan`` of ``profile`` runs it (bench --also)."""
        return target

    @abstractmethod
    def target_session(self, target: LoadedModel, device: torch.device, runtime: RuntimeMode = EAGER) -> Session:
        """A session over the target's weights."""

    def has_wide_copy(self, target: LoadedModel) -> bool:
        """Whether a second, unrepacked copy of the target's weights runs other kernels than its session's own
        (docs/backends.md, "Wide verifies on unrepacked weights"): the profiler times that copy only then."""
        return False

    @abstractmethod
    def target_network(self, target: LoadedModel, device: torch.device) -> "torch.nn.Module | Session":
        """What the profiler decodes and times the target through: its network, or a session over it."""

    @abstractmethod
    def drafter_network(self, spec: DrafterSpec, target: LoadedModel,
                        device: torch.device) -> "torch.nn.Module | Session":
        """The causal LM a ``layerskip:`` or ``model:`` drafter (or a middle model) runs."""

    @abstractmethod
    def head_network(self, spec: DrafterSpec, target: LoadedModel, device: torch.device) -> torch.nn.Module:
        """The draft head saved in ``spec.argument``, over the target's hidden states."""

    @abstractmethod
    def context(self, target: LoadedModel) -> int | None:
        """Tokens a session of the target holds: prompt and new tokens (None: no limit known)."""

    @abstractmethod
    def describe_device(self, target: LoadedModel, device: torch.device) -> DeviceInfo:
        """The device a profile measured on this backend records (its ``source`` is this backend's)."""

    @abstractmethod
    def shared_sessions(self, plan: Plan, profile: Profile, parallel: int, threads: int, flag: str = "--parallel"):
        """Where the sessions of ``parallel`` sequences decoded together come from (``LoadedModel.sessions``, with a
        ``batcher``: runtime/batcher.py); SpecplanError (one line, naming the command's ``flag``) for a plan that
        cannot run so here."""

    def set_threads(self, threads: int) -> None:
        """Run on ``threads`` CPU threads from now on (where the process sets them, not each session)."""

    @abstractmethod
    def threads_used(self, session: Session) -> int:
        """The CPU threads ``session`` (the plain engine's target session) decodes on."""
