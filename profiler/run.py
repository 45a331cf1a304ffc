"""``specplan profile``: measure latency curves and acceptance, return a Profile.

Steps: load the target (and each model drafter); measure T(n) per model over a warm cache
of ``context`` tokens; decode the calibration prompts greedily with the target; replay
each drafter over those outputs for its acceptance statistics: chains and ranked children
for model drafters, and for retrieval drafters their ranked candidates alone (``rank_accept``)
and beside the best model drafter's children (``retrieval_rank_accept``, Graft arXiv
2605.20104; ``calibration.graft_siblings`` names that model); where the prompts carry a client's
prediction, replay it as a drafter at each candidate length (``prediction``, profiler/prediction_acceptance.py).
"""

from __future__ import annotations

import datetime
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import transformers
from tqdm import tqdm

from specplan.core.version import __version__
from specplan.core.backends import traits
from specplan.core.drafter_spec import DrafterSpec
from specplan.core.errors import DrafterSpecError
from specplan.core.profile import AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry, shape_of_network
from specplan.core.prompts import Prompt
from specplan.runtime.backend import Session
from specplan.runtime.backends import backend_for
from specplan.runtime.build import build_drafter, build_tree_drafter, eos_ids
from specplan.models.chat import encode_prompt
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.head import HeadDrafter
from specplan.runtime.drafters.head_model import is_draft_head
from specplan.runtime.engine import SpeculativeEngine
from specplan.models.load import LoadedModel
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.profiler.engine_floor import engine_plain_ms, flash_attention_off
from specplan.profiler.acceptance import AcceptanceCounter, replay_model
from specplan.profiler.head_acceptance import replay_head
from specplan.profiler.batch_latency import MAX_TOKENS, measure_batch_curves
from specplan.profiler.batch_overhead import measure_batch_overhead, repeated_to
from specplan.profiler.curve_checkpoint import load_curves, save_curves
from specplan.core.limits import LATENCY_CONTEXT, LONGEST_LOOKUP_CHAIN, MIN_CONTEXT
from specplan.profiler.latency import WIDTHS, measure_head_latency, measure_latency
from specplan.profiler.acceptance import teacher_forced_logits
from specplan.profiler.prediction_acceptance import prediction_calibration
from specplan.profiler.retrieval_acceptance import replay_retrieval
from specplan.profiler.wide_verify import NEVER, WIDE_CURVE, measure_both, route
from specplan.core.yamlio import read_document


DECODE_STRATA = 3  # equal shares of the decode positions, one latency cache at each one's median
ANSWER_TOKENS = 128  # the answer a plan is run for, over which decode positions count (--quick calibrates on 64)


@dataclass(frozen=True)
class ProfileSettings:
    max_new_tokens: int = 128  # greedy tokens per calibration prompt
    context: int | None = None  # cached tokens under each latency measurement; None: the prompts' (decode_contexts)
    repeats: int = 15  # timed passes over the widths (median per width; ~7 s for a 135M target on 2 cores)
    gamma: int = 8  # chain length of the accepted-length histogram
    lookup_gamma: int = LONGEST_LOOKUP_CHAIN  # the same for lookups that draft only on a match (ngram:N:K,
    # K >= 2): they draft a whole continuation when they draft at all, so chains longer than a model's can pay
    rank_width: int = 8  # ranked children per position for rank_accept
    prompts_label: str = "spec-bench:calibration"
    middles: bool = True  # also measure drafters against each model drafter (candidate middle models)
    runtime: RuntimeMode = EAGER  # the runtime whose latency is measured (and recorded as each model's mode)
    batch_sizes: tuple[int, ...] = (1,)  # T(n, b) is also measured at each b > 1 (profiler/batch_latency.py)
    batch_max_tokens: int = MAX_TOKENS  # widths with b * n above this are not timed at batch b
    flash_attention: str = "llama.cpp"  # llama.cpp fast numerics: llama.cpp (its choice) | off | measure (profiler/engine_floor.py)

    @classmethod
    def quick(cls) -> "ProfileSettings":
        return cls(max_new_tokens=64, repeats=9, batch_max_tokens=1024)  # fewer repeats let a slow spell of the machine skew a median


def decode_contexts(prompt_lengths: list[int], max_new_tokens: int) -> tuple[int, ...]:
    """The caches the latency curves are timed over, averaged (docs/planner-math.md section 7.1): the
    positions calibration tokens are decoded at (each prompt decoding ``max_new_tokens`` after its prompt:
    the profile's 128, or more where its calibration decodes more) cut into ``DECODE_STRATA`` equal shares,
    and the median of each. A decode rate pooled over prompts is one over the mean T(1) over those positions,
    and T grows with the cache in steps: llama.cpp attends over the used cells padded to a multiple of 256.
    On the Xeon of docs/results.md a SmolLM2 token cost 16.4 ms over 240 cached tokens and 21.6 over 256 (a
    span of 512). Priced on such a curve, the thirds' medians came closer to the mean over every position than
    two quartiles did: 2% off it on average over six prompt sets against 4% (``measurements/context_span.py
    --workloads``; docs/results.md, "Three caches instead of two").

    >>> decode_contexts([60, 120, 900], 64), decode_contexts([10], 128), decode_contexts([], 64)
    ((92, 152, 932), (31, 74, 116), (256,))
    """
    positions = sorted(position for length in prompt_lengths for position in range(length, length + max_new_tokens))
    if not positions:
        return (LATENCY_CONTEXT,)
    medians = (positions[len(positions) * (2 * third + 1) // (2 * DECODE_STRATA)] for third in range(DECODE_STRATA))
    return tuple(dict.fromkeys(max(MIN_CONTEXT, median) for median in medians))


def averaged_curve(curves: list[LatencyCurve], context: int) -> LatencyCurve:
    """One curve, each width's ms the mean over ``curves`` (timed over different caches) at the widths
    they all have, recorded at ``context``.

    >>> averaged_curve([LatencyCurve(100, (1, 2), (10.0, 16.0)), LatencyCurve(300, (1, 2, 4), (14.0, 20.0, 30.0))], 200)
    LatencyCurve(context=200, n=(1, 2), ms=(12.0, 18.0), source='measured', batch=1)
    """
    widths = [n for n in curves[0].n if all(n in curve.n for curve in curves)]
    ms = tuple(round(sum(curve.ms[curve.n.index(n)] for curve in curves) / len(curves), 4) for n in widths)
    return replace(curves[0], context=context, n=tuple(widths), ms=ms)


def latency_caches(target: LoadedModel, prompts: list[Prompt], settings: ProfileSettings) -> tuple[int, ...]:
    """The cached tokens the curves are timed over: the settings' one context, else :func:`decode_contexts`."""
    if settings.context:
        return (settings.context,)
    lengths = [len(encode_prompt(target.tokenizer, prompt.text)) for prompt in prompts]
    return decode_contexts(lengths, max(settings.max_new_tokens, ANSWER_TOKENS))


def context_ids_for(target: LoadedModel, prompts: list[Prompt], length: int) -> list[int]:
    """``length`` cached tokens of the prompts' text, repeated."""
    ids: list[int] = []
    for prompt in prompts:
        ids.extend(encode_prompt(target.tokenizer, prompt.text))
        if len(ids) >= length:
            break
    return repeated_to(ids, length)


def _target_outputs(target: LoadedModel, prompts: list[Prompt], device: torch.device,
                    settings: ProfileSettings, network: "torch.nn.Module | Session | None" = None,
                    label: str = "target") -> list[tuple[list[int], list[int]]]:
    """(prompt ids, greedy output ids) per prompt, decoded by ``network`` (default: the target; a
    session of any backend)."""
    stop = eos_ids(target) | (network.eos_ids if isinstance(network, Session) else frozenset())
    engine = SpeculativeEngine(network if network is not None else target.model, device, stop,
                               runtime=settings.runtime)
    pairs = []
    for prompt in tqdm(prompts, desc=f"calibration: {label} greedy decoding", unit="prompt"):
        prompt_ids = encode_prompt(target.tokenizer, prompt.text)
        result = engine.generate(prompt_ids, settings.max_new_tokens, SamplingConfig())
        pairs.append((prompt_ids, list(result.token_ids)))
    return pairs


def chain_length(spec: DrafterSpec, settings) -> int:
    """The chain length G a drafter's acceptance is counted at: longer for a match-only lookup."""
    if spec.kind == "ngram" and spec.ngram_sizes[1] >= 2:
        return max(settings.gamma, settings.lookup_gamma)
    return settings.gamma


def _entry(spec: DrafterSpec, counter: AcceptanceCounter, settings, retrieval_rank_accept=(),
           verifier: str = "target") -> AcceptanceEntry:
    accepted_hist = counter.accepted_hist  # censored rounds completed once
    return AcceptanceEntry(
        drafter=spec.id, verifier=verifier, temperature=0.0, alpha=counter.alpha, gamma=counter.gamma,
        accepted_hist=accepted_hist, rank_accept=counter.rank_accept,
        retrieval_rank_accept=tuple(retrieval_rank_accept), samples=sum(accepted_hist),
        drafted_hist=tuple(counter.drafted_hist), per_prompt=tuple(counter.prompts),
    )


def _model_acceptance(spec: DrafterSpec, network: torch.nn.Module, pairs, device, settings, verifier: str = "target",
                      verifier_network: torch.nn.Module | None = None):
    """The entry, its counter, and the model's top-W tokens per output position of each pair.

    A draft head (``head:DIR``) is replayed round by round over ``verifier_network``'s features
    (:mod:`specplan.profiler.head_acceptance`); other models by one teacher-forced forward."""
    counter = AcceptanceCounter(settings.gamma, settings.rank_width)
    if spec.kind == "head":
        drafter = HeadDrafter(spec.id, network, device)

        def replay(prompt_ids, output_ids):
            return replay_head(counter, drafter, verifier_network, prompt_ids, output_ids, device)
    else:
        def replay(prompt_ids, output_ids):
            return replay_model(counter, network, prompt_ids, output_ids, device)
    tops = []
    for prompt_ids, output_ids in tqdm(pairs, desc=f"acceptance: {spec.id} -> {verifier}", unit="prompt", leave=False):
        tops.append(replay(prompt_ids, output_ids))
        counter.end_prompt()
    return _entry(spec, counter, settings, verifier=verifier), counter, tops


def _retrieval_acceptance(build, target: LoadedModel, pairs, device, settings, siblings=None,
                          verifier: "tuple[str, torch.nn.Module | Session]" = ("target", None)):
    """Rank acceptance of a retrieval drafter alone and, given a model's tops, as graft siblings.

    ``verifier`` (id, network or session) whose outputs ``pairs`` are: the target's, or a middle model's.
    """
    verifier_id, verifier_network = verifier
    spec = build.spec
    counter = AcceptanceCounter(chain_length(spec, settings), settings.rank_width)
    graft = AcceptanceCounter(settings.gamma, settings.rank_width) if siblings else None
    tree = build_tree_drafter(spec, target, device)
    sequence = build.drafter if spec.kind == "ngram" else tree  # recycle's chain must see the same table
    generator = torch.Generator()

    def chain(committed: list[int], gamma: int):
        return sequence.propose(committed, gamma, SamplingConfig(), generator).tokens

    progress = tqdm(pairs, desc=f"acceptance: {spec.id} -> {verifier_id}", unit="prompt", leave=False)
    for index, (prompt_ids, output_ids) in enumerate(progress):
        logits = None
        if tree.learns_from_verifier:
            logits = teacher_forced_logits(verifier_network, prompt_ids + output_ids, device)  # [len, vocab]
        replay_retrieval(counter, tree, chain, prompt_ids, output_ids, target_logits=logits,
                         model_top=siblings[index] if siblings else None, graft_counter=graft)
        counter.end_prompt()
    return _entry(spec, counter, settings, graft.rank_accept if graft else (), verifier_id), counter


def _middle_acceptance(built, curves, target: LoadedModel, prompts, device, settings) -> list[AcceptanceEntry]:
    """Acceptance of every cheaper drafter by each model drafter, as a hierarchy's middle model
    would verify them (HSD, arXiv 2510.19705: the pair (j, i) is all a stage needs): replay
    against the middle model's own greedy outputs on the calibration prompts."""
    entries = []
    for middle in (b for b in built if b.model is not None and b.spec.kind != "head"):  # a head verifies nothing
        cost = curves[middle.spec.id].ms[0]
        cheaper = [b for b in built if b is not middle and (b.model is None or curves[b.spec.id].ms[0] < cost)]
        if not cheaper:
            continue
        pairs = _target_outputs(target, prompts, device, settings, middle.model, middle.spec.id)
        for build in cheaper:
            if build.model is not None:
                entries.append(_model_acceptance(build.spec, build.model, pairs, device, settings, middle.spec.id,
                                                 middle.model)[0])
            else:
                entries.append(_retrieval_acceptance(build, target, pairs, device, settings,
                                                     verifier=(middle.spec.id, middle.model))[0])
    return entries


def trained_on_calibration(spec: DrafterSpec, prompts: list[Prompt]) -> str | None:
    """A warning when ``spec`` is a ``specplan distill`` drafter trained on some of ``prompts``
    (its acceptance measured on them is optimistic: it has seen those texts); else None."""
    if spec.kind not in ("head", "model"):
        return None
    manifest = Path(spec.argument) / "distill.yaml"
    if not manifest.is_file():
        return None
    document = read_document(manifest, "distill", DrafterSpecError)
    trained = {str(prompt_id) for prompt_id in (document.get("data") or {}).get("train_prompts") or ()}
    seen = [p.prompt_id for p in prompts if p.prompt_id in trained]
    if not seen:
        return None
    return (f"{spec.id} was trained on {len(seen)} of the {len(prompts)} calibration prompts, so its acceptance here "
            "is optimistic; profile with --prompts FILE of prompts it never saw for an unbiased plan")


def _batched_curves(networks, device, context, settings: ProfileSettings) -> dict[str, tuple]:
    """T(n, b) for every b > 1 of ``settings.batch_sizes``, per model (a draft head runs one
    sequence: none for it, so the planner leaves heads out at b > 1)."""
    batches = [b for b in settings.batch_sizes if b > 1]
    result: dict[str, tuple] = {model_id: () for model_id, _ in networks}
    if not batches:
        return result
    with tqdm(total=len(networks) * len(batches) * len(WIDTHS), desc="latency T(n, b)", unit="curve point") as bar:
        for model_id, network in networks:
            if not is_draft_head(network):
                result[model_id] = measure_batch_curves(network, device, context, batches, settings.repeats,
                                                        settings.batch_max_tokens, model_id, runtime=settings.runtime)
            bar.update(len(batches) * len(WIDTHS))
    return result


def _batch_overheads(target: LoadedModel, prompts: list[Prompt], context: list[int], curves: tuple,
                     device: torch.device) -> tuple:
    """The batched runtime's overhead over the target's T(n, b), one curve per batched curve."""
    if not curves:
        return ()
    encoded = [encode_prompt(target.tokenizer, prompt.text) for prompt in prompts[:32]]
    return tuple(measure_batch_overhead(target.model, device, context, encoded, curve)
                 for curve in tqdm(curves, desc="batched runtime overhead", unit="batch"))


def _widths(target: LoadedModel) -> tuple[int, ...]:
    """The widths T(n) is timed at on the target's backend."""
    return traits(target.backend).profile_widths


def _measure_curves(networks, target: LoadedModel, device, contexts: list[list[int]], settings: ProfileSettings):
    """T(n) of every network (batch 1) and T(n, b) at the settings' batch sizes, timed over each cache of
    ``contexts`` (the settings' repeats shared among them) and averaged (:func:`decode_contexts`)."""
    each = replace(settings, repeats=max(1, -(-settings.repeats // len(contexts))))
    measured = [_measure_curves_over(networks, target, device, context, each) for context in contexts]
    curves = {key: averaged_curve([found[key] for found, _ in measured], settings.context) for key in measured[0][0]}
    batched = {key: tuple(averaged_curve([found[key][index] for _, found in measured], settings.context)
                          for index in range(min(len(found[key]) for _, found in measured)))
               for key in measured[0][1]}
    return curves, batched


def _measure_curves_over(networks, target: LoadedModel, device, context: list[int], settings: ProfileSettings):
    """T(n) of every network (batch 1) and T(n, b) at the settings' batch sizes over one cache."""
    curves = {}
    widths = _widths(target)
    with tqdm(total=len(networks) * len(widths), desc=f"latency T(n) over {len(context)} cached tokens",
              unit="curve point") as bar:
        for model_id, network in networks:
            if is_draft_head(network):  # timed as the drafter calls it, after a target step
                curves[model_id] = measure_head_latency(network, device, context, WIDTHS, settings.repeats, bar.update,
                                                        verifier=target.model, runtime=settings.runtime)
            elif model_id == "target" and getattr(network, "wide_from", 0):  # a session that loaded both copies
                curves[model_id], curves[WIDE_CURVE] = measure_both(network, context, widths, settings.repeats, bar.update)
            else:
                curves[model_id] = measure_latency(network, device, context, widths, settings.repeats, bar.update,
                                                   runtime=settings.runtime)
    return curves, _batched_curves(networks, device, context, settings)


def _curves_once(networks, sources: dict[str, str], target: LoadedModel, device, device_info: DeviceInfo,
                 contexts: list[list[int]], settings: ProfileSettings, checkpoint: Path | None, resume: bool):
    """The curves, from ``checkpoint`` when ``resume`` and its key matches, else measured (and
    written to ``checkpoint``): :mod:`specplan.profiler.curve_checkpoint`."""
    key = {"target": target.fingerprint, "models": sources, "device": device_info.name,
           "numerics": device_info.numerics, "context": [len(context) for context in contexts], "repeats": settings.repeats,
           "runtime": settings.runtime.profile_label, "batch_sizes": list(settings.batch_sizes),
           "widths": list(_widths(target)), "specplan": str(__version__)}
    if checkpoint is not None and resume:
        found = load_curves(checkpoint, key)
        if not isinstance(found, str):
            print(f"specplan: --resume: latency curves from {checkpoint} (delete it to measure them again)")
            return found
        print(f"specplan: --resume: {found}; measuring the curves")
    elif checkpoint is not None and checkpoint.is_file():
        print(f"specplan: {checkpoint} holds the curves of an interrupted profile; --resume reuses them")
    curves, batched = _measure_curves(networks, target, device, contexts, settings)
    if checkpoint is not None:
        save_curves(checkpoint, key, curves, batched)
    return curves, batched


def calibration_estimate(curves: dict, built, prompts: int, settings: ProfileSettings) -> str:
    """The line printed once the curves are measured: how long the calibration's greedy decoding will
    take, from the measured T(1) of the target and of each model drafter (each decodes every prompt
    once when the middles are measured; the replays are one forward per prompt and left out).

    >>> from types import SimpleNamespace as N
    >>> curves = {"target": N(ms=(80.0,)), "small": N(ms=(30.0,))}
    >>> calibration_estimate(curves, [N(model=object(), spec=N(id="small"))], 13, ProfileSettings.quick())
    'specplan: calibration next: 13 prompts x 64 tokens of greedy decoding by the target and 1 model drafter: about 1.5 min'
    """
    models = [b.spec.id for b in built if b.model is not None] if settings.middles else []
    per_token = curves["target"].ms[0] + sum(curves[name].ms[0] for name in models)
    minutes = prompts * settings.max_new_tokens * per_token / 60000.0
    drafters = f" and {len(models)} model drafter{'s' if len(models) > 1 else ''}" if models else ""
    return (f"specplan: calibration next: {prompts} prompts x {settings.max_new_tokens} tokens of greedy decoding by "
            f"the target{drafters}: about {minutes:.1f} min")


def _acceptance_tables(built, target: LoadedModel, target_network, pairs, prompts: list[Prompt], curves: dict,
                       device, settings: ProfileSettings) -> tuple[list, list, str | None]:
    """(acceptance entries, retrieval entries, the graft siblings' model) of every drafter against the
    target's greedy outputs ``pairs`` on ``prompts``, and of cheaper drafters against each model
    drafter (``settings.middles``); ``curves``: each model's T(n), which orders the middles."""
    retrieval, acceptance = [], []
    siblings, graft_model, best = None, None, -1.0
    for build in (b for b in built if b.model is not None):
        entry, _, tops = _model_acceptance(build.spec, build.model, pairs, device, settings, verifier_network=target_network)
        acceptance.append(entry)
        if sum(entry.rank_accept) > best:  # the best tree drafter: retrieval grafts are measured beside it
            siblings, graft_model, best = tops, build.spec.id, sum(entry.rank_accept)
    for build in (b for b in built if b.model is None):
        entry, counter = _retrieval_acceptance(build, target, pairs, device, settings, siblings, ("target", target_network))
        acceptance.append(entry)
        ms = 1000.0 * counter.seconds / max(1, counter.calls)
        retrieval.append(RetrievalEntry(build.spec.id, build.spec.source, round(ms, 4)))
    if settings.middles:
        acceptance.extend(_middle_acceptance(built, curves, target, prompts, device, settings))
    return acceptance, retrieval, graft_model


def held_out_acceptance(target: LoadedModel, drafters: list[DrafterSpec], prompts: list[Prompt], device: torch.device,
                        settings: ProfileSettings, profile: Profile) -> Profile:
    """``profile`` with its acceptance measured again on ``prompts`` (prompts it was not calibrated on),
    its latency curves kept: what a plan solved from ``profile`` would meet on them
    (docs/guide.md, "Your own prompts")."""
    target = replace(target, flash_off=profile.target.flash_attention == "off")
    built = [build_drafter(spec, target, device) for spec in drafters]
    # the target as the profile's plans run it: its unrepacked copy where the profile found one faster
    target_network = backend_for(target.backend).target_network(replace(target, wide_from=profile.target.wide_from), device)
    pairs = _target_outputs(target, prompts, device, settings, target_network, "target on held-out prompts,")
    curves = {model.id: model.latency[0] for model in profile.models}
    acceptance, retrieval, _ = _acceptance_tables(built, target, target_network, pairs, prompts, curves, device, settings)
    calibration = {**profile.calibration, "prompts": settings.prompts_label, "count": len(prompts)}
    prediction = prediction_calibration(pairs, [p.prediction for p in prompts], target.tokenizer, settings.max_new_tokens)
    return replace(profile, acceptance=tuple(acceptance), retrieval=tuple(retrieval), calibration=calibration,
                   prediction=prediction)


def _with_flash_attention_choice(target: LoadedModel, context: list[int], settings: ProfileSettings) -> LoadedModel:
    """``target`` with flash attention off where ``settings`` say so, or (``measure``) where its one-token
    decodes are measured enough cheaper so (profiler/engine_floor.py), saying so in one line."""
    if not traits(target.backend).kernel_settings or target.exact or settings.flash_attention == "llama.cpp":
        return target
    if settings.flash_attention == "off":
        return replace(target, flash_off=True)
    off, with_flash, without = flash_attention_off(target, context, settings.repeats)
    if not off:
        return target
    print(f"flash attention off: a plain token takes {without:.1f} ms without it against {with_flash:.1f} ms with "
          "it on this machine (llama.cpp's choice; the floor stays llama.cpp's own settings)", flush=True)
    return replace(target, flash_off=True)


def run_profile(target: LoadedModel, drafters: list[DrafterSpec], prompts: list[Prompt],
                device: torch.device, settings: ProfileSettings, checkpoint: Path | None = None,
                resume: bool = False) -> Profile:
    """Measure everything a plan needs for ``target`` and ``drafters`` on ``device``; the latency
    curves go to ``checkpoint`` as soon as they are measured (and come from it with ``resume``)."""
    for spec in drafters:
        message = trained_on_calibration(spec, prompts)
        if message is not None:
            warnings.warn(message, stacklevel=2)
    built = [build_drafter(spec, target, device) for spec in drafters]  # on llama.cpp a model drafter's "model" is a session
    lengths = latency_caches(target, prompts, settings)
    settings = replace(settings, context=round(sum(lengths) / len(lengths)))  # the curves' nominal context
    contexts = [context_ids_for(target, prompts, length) for length in lengths]
    context = context_ids_for(target, prompts, settings.context)  # one cache where one measurement is asked
    target = _with_flash_attention_choice(target, context, settings)
    # on llama.cpp the target's session loads the unrepacked copy too (never used but while the
    # curves time it) where some of its weights are repacked; else the two copies would run one set of kernels
    backend = backend_for(target.backend)
    wide = NEVER if backend.has_wide_copy(target) else 0
    target_network = backend.target_network(replace(target, wide_from=wide), device)
    networks = [("target", target_network)] + [(b.spec.id, b.model) for b in built if b.model is not None]
    sources = {"target": target.source, **{b.spec.id: b.spec.source for b in built if b.model is not None}}
    device_info = backend.describe_device(target, device)
    curves, batched = _curves_once(networks, sources, target, device, device_info, contexts, settings, checkpoint, resume)
    overheads = _batch_overheads(target, prompts, context, batched["target"], device)
    print(calibration_estimate(curves, built, len(prompts), settings), flush=True)
    pairs = _target_outputs(target, prompts, device, settings, target_network)
    target_curve, wide_from = route(curves["target"], curves.get(WIDE_CURVE))
    floor_ms = sum(engine_plain_ms(target, curves["target"], cache, settings.repeats) for cache in contexts) / len(contexts)
    models = [ModelEntry(mode=settings.runtime.profile_label, id="target", source=target.source, fingerprint=target.fingerprint, dtype=target.dtype,
                         role="target", latency=(target_curve,) + batched["target"], shape=shape_of_network(target.model),
                         batch_overhead=overheads, wide_from=wide_from, engine_plain_ms=round(floor_ms, 4),
                         flash_attention="off" if target.flash_off else "")]
    for build in (b for b in built if b.model is not None):
        base = "target" if build.spec.kind == "layerskip" else None
        fingerprint = target.fingerprint + f"|{build.spec.source}" if base else ""
        models.append(ModelEntry(mode=settings.runtime.profile_label, id=build.spec.id, source=build.spec.source, fingerprint=fingerprint,
                                 dtype=target.dtype, role="drafter", latency=(curves[build.spec.id],) + batched[build.spec.id],
                                 base=base,
                                 shape=shape_of_network(build.model)))
    acceptance, retrieval, graft_model = _acceptance_tables(built, target, target_network, pairs, prompts, curves,
                                                            device, settings)
    # a client's prediction, where the prompts carry one, replayed as a drafter: no model forward (section 12.6)
    prediction = prediction_calibration(pairs, [p.prediction for p in prompts], target.tokenizer, settings.max_new_tokens)
    return Profile(
        device=device_info,
        models=tuple(models),
        acceptance=tuple(acceptance),
        retrieval=tuple(retrieval),
        created=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        software={"specplan": str(__version__), "torch": str(torch.__version__), "transformers": str(transformers.__version__)},
        calibration={"prompts": settings.prompts_label, "count": len(prompts), "temperature": 0.0,
                     "max_new_tokens": settings.max_new_tokens, "context": settings.context,
                     **({"contexts": list(lengths)} if len(lengths) > 1 else {}),
                     **({"graft_siblings": graft_model} if graft_model else {})},
        prediction=prediction,
    )
