"""The peers a user would pick instead of a plan, all through transformers' ``generate`` on the
same weights, dtype, threads, prompts and max-new-tokens:

- ``plain``: greedy (or the same sampling) decoding with ``generate``;
- ``hf-assisted``: assisted generation (Leviathan et al., arXiv 2211.17192; Hugging Face,
  "Assisted generation", 2023) with the plan's drafter network as ``assistant_model``: a
  layer-skip view over the target's own weights, or a ``model:`` drafter. transformers 5
  reads the draft length from the assistant's ``generation_config.num_assistant_tokens``;
  the bench sets it to the plan's gamma with the ``constant`` schedule and no confidence
  threshold, so that the peer drafts exactly what the plan's stage drafts;
- ``hf-lookup``: prompt-lookup decoding (Saxena 2023; ``prompt_lookup_num_tokens`` and
  ``max_matching_ngram_size``).

Forward hooks on the target (and the assistant) count and time their forwards. A layer-skip
view is a shallow copy of the target and shares its hook table, so one hook serves both and
tells them apart by the module it is called with.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from specplan.bench.metrics import Measurement
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.timing import now


@dataclass
class ForwardClock:
    """Forward calls seen by hooks: role (``target`` | ``assistant``) -> [(width, seconds)]."""

    calls: dict[str, list[tuple[int, float]]] = field(default_factory=lambda: {"target": [], "assistant": []})

    def seconds(self, role: str | None = None) -> float:
        roles = [role] if role else list(self.calls)
        return sum(seconds for r in roles for _, seconds in self.calls[r])

    def prompt_seconds(self, prompt_tokens: int) -> float:
        """Seconds of the forwards that read the whole prompt: a model's first forward (assisted
        generation's and prompt lookup's first target forward also verifies the first drafts)."""
        return sum(seconds for calls in self.calls.values() for width, seconds in calls if width >= prompt_tokens)


@contextmanager
def clocked(target: torch.nn.Module, assistant: torch.nn.Module | None, device: torch.device) -> Iterator[ForwardClock]:
    """Time every forward of ``target`` and ``assistant`` while the block runs."""
    clock = ForwardClock()
    started: dict[int, float] = {}

    def before(module, args, kwargs):
        started[id(module)] = now(device)

    def after(module, args, kwargs, output):
        role = "target" if module is target else "assistant" if module is assistant else None
        if role is None:
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        width = int(ids.shape[-1]) if ids is not None else 0
        clock.calls[role].append((width, now(device) - started.pop(id(module))))

    handles = []
    tables = []
    for module in (target, assistant):
        if module is None or any(module._forward_hooks is table for table in tables):
            continue  # a view sharing the target's hook table is already covered
        tables.append(module._forward_hooks)
        handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(module.register_forward_hook(after, with_kwargs=True))
    try:
        yield clock
    finally:
        for handle in handles:
            handle.remove()


def assistant_with_gamma(network: torch.nn.Module, target: torch.nn.Module, gamma: int) -> torch.nn.Module:
    """``network`` with its own generation config asking transformers for exactly ``gamma`` drafts.

    A layer-skip view shares the target's ``generation_config`` object, so the config is copied
    onto the view before it is changed.
    """
    config = copy.deepcopy(getattr(network, "generation_config", None) or target.generation_config)
    config.num_assistant_tokens = int(gamma)
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0  # 0 disables transformers' early stop of drafting
    network.generation_config = config
    return network


class GenerateMethod:
    """``model.generate`` with fixed extra arguments (an assistant, prompt lookup) as a bench method."""

    def __init__(self, name: str, kind: str, model: torch.nn.Module, device: torch.device, eos_ids: set[int],
                 sampling: SamplingConfig, description: str, assistant: torch.nn.Module | None = None,
                 prefill_from_hooks: bool = False, **generate_kwargs):
        self.name = name
        self.kind = kind
        self.model = model
        self.device = device
        self.eos_ids = sorted(eos_ids)
        self.sampling = sampling
        self.description = description
        self.assistant = assistant
        self.generate_kwargs = generate_kwargs
        self.prefill_from_hooks = prefill_from_hooks  # report the forwards that read the whole prompt as prefill
        self.settings = {k: v for k, v in generate_kwargs.items()}
        if assistant is not None:
            self.settings["num_assistant_tokens"] = int(assistant.generation_config.num_assistant_tokens)

    def _sampling_kwargs(self) -> dict:
        if self.sampling.greedy:
            return {"do_sample": False}
        torch.manual_seed(self.sampling.seed)
        return {"do_sample": True, "temperature": self.sampling.temperature, "top_p": self.sampling.top_p, "top_k": 0}

    @torch.inference_mode()
    def run(self, prompt_ids: list[int], max_new_tokens: int) -> Measurement:
        input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)  # [1, prompt]
        kwargs = dict(self.generate_kwargs, **self._sampling_kwargs())
        if self.assistant is not None:
            kwargs["assistant_model"] = self.assistant
        with clocked(self.model, self.assistant, self.device) as clock:
            start = now(self.device)
            output = self.model.generate(
                input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
                eos_token_id=self.eos_ids, pad_token_id=self.eos_ids[0], **kwargs,
            )
            seconds = now(self.device) - start
        new = output[0, len(prompt_ids):].tolist()
        return Measurement(
            token_ids=tuple(int(t) for t in new),
            seconds=seconds,
            target_forwards=len(clock.calls["target"]),  # every target forward of generate commits tokens
            forward_seconds=clock.seconds(),
            prefill_seconds=clock.prompt_seconds(len(prompt_ids)) if self.prefill_from_hooks else None,
            prefill_tokens=1 if self.prefill_from_hooks and new else 0,  # generate's prompt forward yields the first token
            draft_seconds=clock.seconds("assistant") if self.assistant is not None else None,
        )


def _model_stage(plan, profile):
    """(drafter id, gamma) of the plan's stage drafted by a network for the target, or None."""
    for stage in plan.stages:
        if stage.verifier == plan.target and profile.model(stage.drafter) is not None:
            shape = stage.shape
            return stage.drafter, shape.gamma if shape.kind == "sequence" else max(1, shape.depth)
    return None


def lookup_settings(plan, profile, costs: dict) -> tuple[int, int, str]:
    """(max n-gram, gamma, why) for hf-lookup: the plan's n-gram stage, else the planner's best n-gram."""
    ngram = {r.id: int(r.source.split(":", 1)[1]) for r in profile.retrieval if r.source.startswith("ngram:")}
    for stage in plan.stages:
        if stage.drafter in ngram and stage.shape.kind == "sequence":
            return ngram[stage.drafter], stage.shape.gamma, "the plan's n-gram stage"
    ranked = sorted((terms.ms_per_token, drafter, gamma) for (drafter, gamma), terms in costs.items() if drafter in ngram)
    if ranked:
        _, drafter, gamma = ranked[0]
        return ngram[drafter], gamma, f"the planner's best n-gram configuration ({drafter}, gamma {gamma})"
    return 2, 10, "transformers' documented example (no n-gram drafter in the profile)"


def build_peers(names: list[str], runner, sampling: SamplingConfig, costs: dict, notes: list[str],
                assistant_id: str | None = None) -> list[GenerateMethod]:
    """The transformers peers named in ``names`` (plain, hf-assisted, hf-lookup) for ``runner``'s plan.

    ``costs``: the planner's (drafter, gamma) -> CostTerms, used to pick gamma for a drafter the
    plan does not use. Peers that cannot run are left out with a line in ``notes``.
    """
    from specplan.core.drafter_spec import parse_drafter_spec
    from specplan.runtime.build import build_drafter, drafter_source, eos_ids

    target, plan, profile = runner.target, runner.plan, runner.profile
    eos = eos_ids(target)
    methods: list[GenerateMethod] = []
    if "plain" in names:
        methods.append(GenerateMethod("plain", "plain", target.model, runner.device, eos, sampling,
                                      "transformers generate, the target alone"))
    if "hf-assisted" in names:
        chosen = _model_stage(plan, profile)
        if assistant_id is not None:
            gammas = sorted((t.ms_per_token, g) for (d, g), t in costs.items() if d == assistant_id)
            chosen = (assistant_id, gammas[0][1]) if gammas else (assistant_id, 4)
        if chosen is None:
            notes.append("hf-assisted skipped: the plan has no drafter network (layerskip: or model:) to hand to "
                         "transformers; pass --assistant ID to compare with one of the profile's drafters")
        else:
            drafter, gamma = chosen
            network = build_drafter(parse_drafter_spec(drafter_source(profile, drafter)), target, runner.device).model
            assistant = assistant_with_gamma(network, target.model, gamma)
            methods.append(GenerateMethod("hf-assisted", "peer", target.model, runner.device, eos, sampling,
                                          f"transformers assisted generation, assistant {drafter}, "
                                          f"num_assistant_tokens {gamma} (constant)", assistant=assistant))
    if "hf-lookup" in names:
        size, gamma, why = lookup_settings(plan, profile, costs)
        methods.append(GenerateMethod("hf-lookup", "peer", target.model, runner.device, eos, sampling,
                                      f"transformers prompt lookup, prompt_lookup_num_tokens {gamma}, "
                                      f"max_matching_ngram_size {size} ({why})",
                                      prompt_lookup_num_tokens=gamma, max_matching_ngram_size=size))
    return methods
