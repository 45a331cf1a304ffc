"""``specplan profile``: measure latency curves and acceptance, return a Profile.

Steps: load the target (and each model drafter); measure T(n) per model over a warm cache
of ``context`` tokens; decode the calibration prompts greedily with the target; replay
each drafter over those outputs for its acceptance statistics: chains and ranked children
for model drafters, and for retrieval drafters their ranked candidates alone (``rank_accept``)
and beside the best model drafter's children (``retrieval_rank_accept``, Graft arXiv
2605.20104; ``calibration.graft_siblings`` names that model).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch
import transformers
from tqdm import tqdm

import specplan
from specplan.drafter_spec import DrafterSpec
from specplan.profile import AcceptanceEntry, ModelEntry, Profile, RetrievalEntry, shape_of_network
from specplan.prompts import Prompt
from specplan.runtime.build import build_drafter, build_tree_drafter, eos_ids
from specplan.runtime.chat import encode_prompt
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.models import LoadedModel
from specplan.runtime.profiler.acceptance import AcceptanceCounter, replay_model
from specplan.runtime.profiler.device import describe_device
from specplan.runtime.profiler.latency import WIDTHS, measure_latency
from specplan.runtime.profiler.retrieval_acceptance import replay_retrieval, teacher_forced_logits


@dataclass(frozen=True)
class ProfileSettings:
    max_new_tokens: int = 128  # greedy tokens per calibration prompt
    context: int = 256  # cached tokens under each latency measurement
    repeats: int = 5  # timed forwards per width (median)
    gamma: int = 8  # chain length of the accepted-length histogram
    rank_width: int = 8  # ranked children per position for rank_accept
    prompts_label: str = "spec-bench:calibration"

    @classmethod
    def quick(cls) -> "ProfileSettings":
        return cls(max_new_tokens=64, repeats=3)


def _context_ids(target: LoadedModel, prompts: list[Prompt], length: int) -> list[int]:
    ids: list[int] = []
    for prompt in prompts:
        ids.extend(encode_prompt(target.tokenizer, prompt.text))
        if len(ids) >= length:
            break
    while len(ids) < length:
        ids = ids + ids
    return ids[:length]


def _target_outputs(target: LoadedModel, prompts: list[Prompt], device: torch.device,
                    settings: ProfileSettings) -> list[tuple[list[int], list[int]]]:
    engine = SpeculativeEngine(target.model, device, eos_ids(target))
    pairs = []
    for prompt in tqdm(prompts, desc="calibration: target greedy decoding", unit="prompt"):
        prompt_ids = encode_prompt(target.tokenizer, prompt.text)
        result = engine.generate(prompt_ids, settings.max_new_tokens, SamplingConfig())
        pairs.append((prompt_ids, list(result.token_ids)))
    return pairs


def _entry(spec: DrafterSpec, counter: AcceptanceCounter, settings, retrieval_rank_accept=()) -> AcceptanceEntry:
    return AcceptanceEntry(
        drafter=spec.id, verifier="target", temperature=0.0, alpha=counter.alpha, gamma=settings.gamma,
        accepted_hist=tuple(counter.hist), rank_accept=counter.rank_accept,
        retrieval_rank_accept=tuple(retrieval_rank_accept), samples=sum(counter.hist),
    )


def _model_acceptance(spec: DrafterSpec, network: torch.nn.Module, pairs, device, settings):
    """The entry, its counter, and the model's top-W tokens per output position of each pair."""
    counter = AcceptanceCounter(settings.gamma, settings.rank_width)
    tops = [replay_model(counter, network, prompt_ids, output_ids, device)
            for prompt_ids, output_ids in tqdm(pairs, desc=f"acceptance: {spec.id}", unit="prompt", leave=False)]
    return _entry(spec, counter, settings), counter, tops


def _retrieval_acceptance(build, target: LoadedModel, pairs, device, settings, siblings=None):
    """Rank acceptance of a retrieval drafter alone and, given a model's tops, as graft siblings."""
    spec = build.spec
    counter = AcceptanceCounter(settings.gamma, settings.rank_width)
    graft = AcceptanceCounter(settings.gamma, settings.rank_width) if siblings else None
    tree = build_tree_drafter(spec, target, device)
    sequence = build.drafter if spec.kind == "ngram" else tree  # recycle's chain must see the same table
    generator = torch.Generator()

    def chain(committed: list[int], gamma: int):
        return sequence.propose(committed, gamma, SamplingConfig(), generator).tokens

    for index, (prompt_ids, output_ids) in enumerate(tqdm(pairs, desc=f"acceptance: {spec.id}", unit="prompt", leave=False)):
        logits = None
        if hasattr(tree, "observe"):
            logits = teacher_forced_logits(target.model, prompt_ids + output_ids, device)  # [len, vocab]
        replay_retrieval(counter, tree, chain, prompt_ids, output_ids, target_logits=logits,
                         model_top=siblings[index] if siblings else None, graft_counter=graft)
    return _entry(spec, counter, settings, graft.rank_accept if graft else ()), counter


def run_profile(target: LoadedModel, drafters: list[DrafterSpec], prompts: list[Prompt],
                device: torch.device, settings: ProfileSettings) -> Profile:
    """Measure everything a plan needs for ``target`` and ``drafters`` on ``device``."""
    built = [build_drafter(spec, target, device) for spec in drafters]
    context = _context_ids(target, prompts, settings.context)
    networks = [("target", target.model)] + [(b.spec.id, b.model) for b in built if b.model is not None]
    curves = {}
    with tqdm(total=len(networks) * len(WIDTHS), desc="latency T(n)", unit="curve point") as bar:
        for model_id, network in networks:
            curves[model_id] = measure_latency(network, device, context, WIDTHS, settings.repeats, bar.update)
    pairs = _target_outputs(target, prompts, device, settings)
    models = [ModelEntry(id="target", source=target.source, fingerprint=target.fingerprint, dtype=target.dtype,
                         role="target", latency=(curves["target"],), shape=shape_of_network(target.model))]
    retrieval, acceptance = [], []
    siblings, graft_model, best = None, None, -1.0
    for build in (b for b in built if b.model is not None):
        entry, _, tops = _model_acceptance(build.spec, build.model, pairs, device, settings)
        acceptance.append(entry)
        if sum(entry.rank_accept) > best:  # the best tree drafter: retrieval grafts are measured beside it
            siblings, graft_model, best = tops, build.spec.id, sum(entry.rank_accept)
        base = "target" if build.spec.kind == "layerskip" else None
        fingerprint = target.fingerprint + f"|{build.spec.source}" if base else ""
        models.append(ModelEntry(id=build.spec.id, source=build.spec.source, fingerprint=fingerprint,
                                 dtype=target.dtype, role="drafter", latency=(curves[build.spec.id],), base=base,
                                 shape=shape_of_network(build.model)))
    for build in (b for b in built if b.model is None):
        entry, counter = _retrieval_acceptance(build, target, pairs, device, settings, siblings)
        acceptance.append(entry)
        ms = 1000.0 * counter.seconds / max(1, counter.calls)
        retrieval.append(RetrievalEntry(build.spec.id, build.spec.source, round(ms, 4)))
    return Profile(
        device=describe_device(device),
        models=tuple(models),
        acceptance=tuple(acceptance),
        retrieval=tuple(retrieval),
        created=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        software={"specplan": str(specplan.__version__), "torch": str(torch.__version__), "transformers": str(transformers.__version__)},
        calibration={"prompts": settings.prompts_label, "count": len(prompts), "temperature": 0.0,
                     "max_new_tokens": settings.max_new_tokens, "context": settings.context,
                     **({"graft_siblings": graft_model} if graft_model else {})},
    )
