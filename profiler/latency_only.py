"""``specplan profile --latency-only --arch SHAPE``: T(n) of models built from a config, random weights.

Latency needs no trained weights (:mod:`specplan.models.arch`), so a GPU user can profile
Llama-3-8B's or a 70B's verify curve before downloading anything. Acceptance does need the
real models: it is copied from a measured profile (``--acceptance-from``) whose target and
model drafters stand for the shapes given, in order, or left out (then no plan is solved).
``calibration.sources`` says which parts were measured here and which came from where.
"""

from __future__ import annotations

import datetime
import gc
from dataclasses import dataclass
from types import SimpleNamespace

import torch
import transformers
from tqdm import tqdm

from specplan.core.errors import ProfileError
from specplan.core.limits import LATENCY_CONTEXT
from specplan.core.profile import LatencyCurve, ModelEntry, Profile, shape_from_config
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.core.version import __version__
from specplan.models.arch import ArchSpec, build_random, scale_to_layers
from specplan.profiler.batch_latency import measure_batch_curves
from specplan.profiler.latency import WIDTHS, measure_latency
from specplan.runtime.device import describe_device


@dataclass(frozen=True)
class LatencyOnlySettings:
    dtype: str = "bfloat16"
    context: int = LATENCY_CONTEXT  # cached tokens under each measurement (no prompts to take them from)
    repeats: int = 9
    runtime: RuntimeMode = EAGER
    batch_sizes: tuple[int, ...] = (1,)  # T(n, b) also at each b > 1 (profiler/batch_latency.py)
    quants: tuple[str, ...] = ("none",)  # the target's precision first, then comparison variants (nf4 | gptq)


def context_ids(vocab: int, length: int) -> list[int]:
    """Deterministic token ids spread over the vocabulary (their values do not change the cost)."""
    return [(7919 * index + 11) % vocab for index in range(length)]


def _measure(spec: ArchSpec, layers: int | None, device: torch.device, settings: LatencyOnlySettings,
             bar: tqdm, quant: str = "none") -> tuple[LatencyCurve, ...]:
    """T(n) and T(n, b) for each batch size of ``settings`` (ascending) of ``spec`` with ``layers``,
    its random weights packed as ``quant`` (quant/random_weights.py) unless ``none``."""
    model = build_random(spec, settings.dtype, str(device), layers)
    if quant != "none":
        model = _packed(model, quant, settings.dtype, device)
    try:
        context = context_ids(int(spec.config["vocab_size"]), settings.context)
        curve = measure_latency(model, device, context, WIDTHS, settings.repeats, bar.update, runtime=settings.runtime)
        return (curve, *measure_batch_curves(model, device, context, settings.batch_sizes, settings.repeats,
                                             label=spec.name, runtime=settings.runtime))
    finally:
        del model
        gc.collect()


def _packed(model: torch.nn.Module, quant: str, dtype: str, device: torch.device) -> torch.nn.Module:
    """``model`` with its random weights packed as ``quant`` (through a temporary checkpoint)."""
    import tempfile

    from specplan.core.quiet import quiet_again
    from specplan.quant.random_weights import random_4bit

    with tempfile.TemporaryDirectory(prefix="specplan-random-4bit-") as folder:
        packed = random_4bit(model, quant, folder, dtype, str(device))
    quiet_again()  # GPTQModel turns its own logging back on when it loads
    del model
    gc.collect()
    return packed


def measure_arch(spec: ArchSpec, device: torch.device, settings: LatencyOnlySettings, quant: str = "none"
                 ) -> tuple[tuple[LatencyCurve, ...], str]:
    """The curves of ``spec`` at its full depth (batch 1, then any larger batch sizes), its
    weights packed as ``quant`` unless ``none``, and a line saying how they were obtained."""
    passes = len(spec.slice) or 1
    weights = "random weights" if quant == "none" else f"random weights packed as {quant}"
    with tqdm(total=passes * len(WIDTHS), desc=f"latency T(n): {spec.name} {quant}", unit="curve point") as bar:
        if not spec.slice:
            curves = _measure(spec, None, device, settings, bar, quant)
            return curves, f"measured: {weights} of {spec.name}, all {spec.layers} layers"
        shorts, longs = (_measure(spec, layers, device, settings, bar, quant) for layers in spec.slice)
    low, high = spec.slice
    curves = tuple(
        LatencyCurve(short.context, short.n,
                     tuple(round(scale_to_layers(a, b, low, high, spec.layers), 4) for a, b in zip(short.ms, long.ms)),
                     batch=short.batch)
        for short, long in zip(shorts, longs) if short.n == long.n)
    how = (f"measured: {weights} of {spec.name} with {low} and {high} of its {spec.layers} layers, "
           "scaled linearly in layers")
    return curves, how


def _ids_for(specs: list[ArchSpec], borrowed: Profile | None) -> list[str]:
    """Model ids: ``target`` then the drafters; with a borrowed profile, its model ids in order."""
    if borrowed is None:
        return ["target"] + [f"arch-{spec.name}" for spec in specs[1:]]
    drafters = [model.id for model in borrowed.models if model.role == "drafter" and model.base is None]
    if len(drafters) != len(specs) - 1:
        raise ProfileError(f"--acceptance-from has {len(drafters)} model drafter(s) ({', '.join(drafters) or 'none'}) "
                           f"but {len(specs) - 1} --arch shape(s) follow the target; give one --arch per drafter, "
                           "in the profile's order")
    return ["target", *drafters]


def _entry(model_id: str, spec: ArchSpec, settings: LatencyOnlySettings, curves: tuple[LatencyCurve, ...],
           role: str, quant: str) -> ModelEntry:
    return ModelEntry(id=model_id, source=f"arch:{spec.name}", fingerprint=spec.fingerprint, dtype=settings.dtype,
                      role=role, latency=curves, mode=settings.runtime.profile_label, quant=quant,
                      shape=shape_from_config(SimpleNamespace(**spec.config)))


def run_latency_only(specs: list[ArchSpec], device: torch.device, settings: LatencyOnlySettings,
                     borrowed: Profile | None = None, borrowed_from: str = "") -> Profile:
    """Measure every shape of ``specs`` (the first is the target, at ``settings.quants[0]``;
    each further quant adds a comparison variant of it) and assemble a profile."""
    from specplan.profiler.variants import VARIANT_ROLE, variant_id
    from specplan.quant.random_weights import random_label

    ids = _ids_for(specs, borrowed)
    models, sources = [], {}
    for index, (model_id, spec) in enumerate(zip(ids, specs)):
        quant = settings.quants[0] if index == 0 else "none"
        label = "none" if quant == "none" else random_label(spec.config, quant)
        curves, how = measure_arch(spec, device, settings, quant)
        sources[model_id] = how
        models.append(_entry(model_id, spec, settings, curves, "target" if index == 0 else "drafter", label))
    for quant in settings.quants[1:]:
        label = "none" if quant == "none" else random_label(specs[0].config, quant)
        model_id = variant_id(label, settings.dtype)
        curves, sources[model_id] = measure_arch(specs[0], device, settings, quant)
        models.append(_entry(model_id, specs[0], settings, curves, VARIANT_ROLE, label))
    acceptance, retrieval = (), ()
    if borrowed is not None:
        acceptance, retrieval = borrowed.acceptance, borrowed.retrieval
        known = set(ids) | {entry.id for entry in retrieval}
        acceptance = tuple(a for a in acceptance if a.drafter in known and a.verifier in known)
        sources["acceptance"] = f"copied from {borrowed_from} (measured on {borrowed.device.name})"
    else:
        sources["acceptance"] = "none: pass --acceptance-from PROFILE to plan with measured acceptance"
    return Profile(
        device=describe_device(device), models=tuple(models), acceptance=acceptance, retrieval=retrieval,
        created=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        software={"specplan": str(__version__), "torch": str(torch.__version__),
                  "transformers": str(transformers.__version__)},
        calibration={"latency_only": True, "context": settings.context, "sources": sources,
                     **({"prompts": borrowed.calibration.get("prompts", "")} if borrowed is not None else {})},
    )

