"""The llama.cpp backend: GGUF files as they are, through llama-cpp-python (docs/backends.md). Its sessions
(runtime/llama_cpp_session.py) and their context size, the threads they take, its target's wide copy
(runtime/llama_cpp_wide.py) and draft-tree paths, its ``model:GGUF`` drafters, and the device it measures."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import torch

from specplan.core.backends import LLAMA_CPP
from specplan.core.drafter_spec import DrafterSpec
from specplan.core.errors import DrafterSpecError, PlanError, SpecplanError
from specplan.core.plan import Plan
from specplan.core.profile import DeviceInfo, Profile
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.models.load import LoadedModel, gguf_file, load_gguf_model
from specplan.runtime.backend import Session
from specplan.runtime.backends.base import Backend
from specplan.runtime.device import describe_device

LLAMA_CPP_CONTEXT = 4096  # cells of each llama.cpp session: the prompt, the new tokens and one draft
TREE_PATHS = 64  # sequence ids a llama.cpp session keeps for a draft tree's paths unless the plan needs more


def llama_cpp_tree_paths(plan: Plan) -> int:
    """The sequence ids for draft-tree paths a llama.cpp session of ``plan`` needs (its widest tree's
    root-to-leaf paths); PlanError (one line) beyond what one context holds: 256 sequence ids, less one
    for the committed tokens and one spare (runtime/llama_cpp_session.py)."""
    from specplan.runtime.llama_cpp_shared import LLAMA_MAX_SEQUENCES

    paths = plan.most_tree_paths()
    if paths > LLAMA_MAX_SEQUENCES - 2:
        raise PlanError(f"the plan's draft tree has {paths} root-to-leaf paths, and a llama.cpp context holds "
                        f"{LLAMA_MAX_SEQUENCES - 2}: re-plan with a smaller --max-budget")
    return paths


def wide_extend_width(profile: Profile) -> int:
    """The profile's ``wide_from`` (0: none): the target's extends of that many tokens or more decode on a
    second, unrepacked copy of its weights, faster there. Every plan loads it, plain decoding too: a
    prompt's prefill is such an extend (docs/backends.md, "Wide verifies on unrepacked weights"; on the
    Xeon with AMX a Spec-Bench prompt's prefill took 2.0 s on the repacked weights, 1.3 s on the unrepacked
    copy, as in llama-server, with decoding no slower: docs/results.md, "Repacking without AMX")."""
    return profile.target.wide_from


def llama_cpp_session(gguf: str | Path, target: LoadedModel, exact: bool, wide_from: int = 0,
                      flash_off: bool = False) -> Session:
    """A llama.cpp session over ``gguf`` with the run's threads (``target.threads``; 0: every core);
    ``wide_from``: see :class:`~specplan.runtime.llama_cpp_session.LlamaCppSession` (the target's only).

    ``exact`` for the target's session when the run asks for it (``target.exact``); a drafter's
    session runs llama.cpp's fast kernels whatever the target does, since the verifier alone decides
    the output (docs/backends.md, "What lossless means here")."""
    from specplan.runtime.llama_cpp_session import LlamaCppSession

    if target.sessions is not None:  # several requests decode together (runtime/llama_cpp_shared.py)
        return target.sessions(gguf, exact, flash_off, wide_from)
    return LlamaCppSession(gguf, n_ctx=LLAMA_CPP_CONTEXT, threads=target.threads or None, exact=exact,
                           wide_from=wide_from, flash_off=flash_off, max_tree_paths=max(TREE_PATHS, target.tree_paths))


class LlamaCppBackend(Backend):
    """Targets, ``model:GGUF`` drafters and middle models as llama.cpp sessions over their GGUF files."""

    traits = LLAMA_CPP
    shares_target_session = True  # one llama.cpp context serves the plan, plain decoding and the bench's methods
    # llama.cpp reuses its compute graph between decodes of one shape, as a run of plain or equal-width
    # rounds does; building it again costs ~0.6 ms a decode (docs/planner-math.md section 7.1)
    reuses_graph_per_shape = True
    rounding_note = ("llama.cpp: a decode of n tokens is not bit-identical to n one-token decodes (docs/backends.md), "
                     "so an output may part from plain decoding at a numerical near-tie; each parting names its top-2 gap")
    profile_note = "specplan: backend llama.cpp: the GGUF file as llama.cpp runs it (--backend torch for the torch runtime)"

    def load_target(self, source: str, dtype: str, device: torch.device, threads: int = 0,
                    exact: bool = True) -> LoadedModel:
        return load_gguf_model(source, threads, exact=exact)  # llama.cpp computes in the file's own types

    def open_target(self, plan: Plan, profile: Profile, device: torch.device, threads: int = 0,
                    sessions=None) -> LoadedModel:
        """The GGUF file with the run's threads and the profile's numerics and flash attention; a wide copy
        where the profile has one (shared by the slots where ``sessions`` share contexts), room for the plan's tree
        paths."""
        return replace(load_gguf_model(profile.target.source, threads, exact=profile.exact),
                       wide_from=wide_extend_width(profile), sessions=sessions,
                       flash_off=profile.target.flash_attention == "off", tree_paths=llama_cpp_tree_paths(plan))

    def for_plan(self, target: LoadedModel, plan: Plan, profile: Profile) -> LoadedModel:
        return replace(target, wide_from=wide_extend_width(profile))  # the other plan's own wide copy

    def shared_sessions(self, plan: Plan, profile: Profile, parallel: int, threads: int, flag: str = "--parallel"):
        """Slots of one llama.cpp context per GGUF file (runtime/llama_cpp_shared.py): fast numerics, and room
        for the plan's tree paths in each slot's sequence ids."""
        from specplan.runtime.llama_cpp_shared import LLAMA_MAX_SEQUENCES, SharedModels, slot_tree_paths

        if parallel > LLAMA_MAX_SEQUENCES // 2:
            raise SpecplanError(f"{flag} {parallel}: llama.cpp decodes 1 to {LLAMA_MAX_SEQUENCES // 2} sequences together")
        if profile.exact:
            raise SpecplanError(f"{flag} {parallel} decodes sequences together, which needs fast numerics; this plan's "
                                f"profile runs exact numerics: re-profile with --numerics fast, or pass {flag} 1")
        paths, room = plan.most_tree_paths(), slot_tree_paths(parallel)
        if paths > room:
            most = LLAMA_MAX_SEQUENCES // (paths + 1)
            raise SpecplanError(f"{flag} {parallel} leaves each sequence {room} sequence ids for a draft tree's "
                                f"paths, and this plan's tree has up to {paths}: pass {flag} {most} or fewer")
        return SharedModels(parallel, LLAMA_CPP_CONTEXT, threads)

    def target_session(self, target: LoadedModel, device: torch.device, runtime: RuntimeMode = EAGER) -> Session:
        return llama_cpp_session(target.path, target, exact=target.exact, wide_from=target.wide_from,
                                 flash_off=target.flash_off)

    def has_wide_copy(self, target: LoadedModel) -> bool:
        """Fast numerics repack the weights, and the file holds some that llama.cpp repacks on this CPU."""
        from specplan.runtime.llama_cpp_repack import repacks_some_weight
        from specplan.runtime.llama_cpp_session import repacks_weights

        return repacks_weights(target.exact) and repacks_some_weight(target.path)

    def target_network(self, target: LoadedModel, device: torch.device) -> Session:
        return self.target_session(target, device)

    def drafter_network(self, spec: DrafterSpec, target: LoadedModel, device: torch.device) -> Session:
        """The llama.cpp session a ``model:`` drafter runs (its GGUF file)."""
        if spec.kind != "model":
            raise DrafterSpecError(f"drafter {spec.source!r} needs the torch backend (llama.cpp runs whole GGUF models); "
                                   "on llama.cpp use model:GGUF, ngram:N, recycle or cache, or profile with --backend torch")
        gguf = gguf_file(spec.argument)
        if gguf is None:
            raise DrafterSpecError(f"drafter {spec.source!r} is not a GGUF file; the llama.cpp backend runs model:GGUF "
                                   "drafters (a registered model or a .gguf path)")
        return llama_cpp_session(gguf, target, exact=False)

    def head_network(self, spec: DrafterSpec, target: LoadedModel, device: torch.device) -> torch.nn.Module:
        raise DrafterSpecError(f"drafter {spec.source!r} reads the target's hidden states, which the llama.cpp backend "
                               "does not return; on llama.cpp use model:GGUF, ngram:N, recycle or cache")

    def context(self, target: LoadedModel) -> int:
        return LLAMA_CPP_CONTEXT

    def describe_device(self, target: LoadedModel, device: torch.device) -> DeviceInfo:
        """This CPU as the llama.cpp backend runs on it: the profile's ``device.source`` says llama.cpp
        measured the curves, so its plans run on that backend (``Profile.backend``)."""
        from specplan.runtime.llama_cpp_session import llama_cpp_version

        threads = target.threads or os.cpu_count() or 1
        cpu = describe_device(torch.device("cpu"))
        numerics = "exact" if target.exact else "fast"
        return replace(cpu, name=f"{cpu.name}, llama.cpp (llama-cpp-python {llama_cpp_version()}, {threads} threads)",
                       source=self.traits.source, numerics=numerics)

    def threads_used(self, session: Session) -> int:
        return session.threads
