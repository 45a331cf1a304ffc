"""Quant-aware profiles: the target's precision is chosen by ``--quant``, each variant is its own entry.

``specplan profile --quant Q1 [--quant Q2 ...]``:

- the first value's model is THE target (``id: target``, ``quant: nf4`` for ``--quant nf4``):
  the drafters are measured against it (acceptance entries with ``verifier: target``), and
  layer-skip drafters share its 4-bit weights;
- every further value adds a comparison entry ``target-<label>`` (``role: variant``,
  e.g. ``target-nf4``, ``target-gptq-w4g64``, ``target-bfloat16`` for ``none``) with its own
  latency curve over the same cached context and no acceptance entries, so the planner sees
  the curves side by side but plans only for the target.

A 4-bit target changes the cost model, not the algorithm: its T(n) is cheap at n = 1 and
steep in n (SpecMQuant, arXiv 2505.22179), so the planner picks shorter drafts.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from tqdm import tqdm

from specplan.core.profile import ModelEntry, Profile, shape_of_network
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.quant.methods import normalize_quants, parse_method
from specplan.profiler.latency import WIDTHS, measure_latency
from specplan.profiler.run import context_ids_for, run_profile
from specplan.quant.backends import require_backend
from specplan.quant.checkpoint import read_manifest
from specplan.quant.load import load_model_variant

VARIANT_ROLE = "variant"


def quant_label(loaded, quant: str) -> str:
    """The profile's ``quant`` field for a model loaded with ``--quant quant``."""
    if quant == "none":
        return "none"
    manifest = read_manifest(loaded.path) or {}
    return str(manifest.get("label", parse_method(quant).label))


def variant_id(label: str, dtype: str) -> str:
    """``target-nf4``, ``target-gptq-w4g64``; a 16-bit variant is named by its dtype.

    >>> variant_id("none", "bfloat16")
    'target-bfloat16'
    """
    return f"target-{dtype if label == 'none' else label}"


def variant_entry(source: str, quant: str, dtype: str, device: torch.device, context: list[int],
                  repeats: int, runtime: RuntimeMode = EAGER) -> ModelEntry:
    """Load one comparison variant, measure its latency curve, free it; its profile entry."""
    loaded = load_model_variant(source, dtype, str(device), quant)
    label = quant_label(loaded, quant)
    with tqdm(total=len(WIDTHS), desc=f"latency T(n) {variant_id(label, dtype)}", unit="curve point") as bar:
        curve = measure_latency(loaded.model, device, context, WIDTHS, repeats, bar.update, runtime=runtime)
    return ModelEntry(mode=runtime.profile_label, id=variant_id(label, dtype), source=source, fingerprint=loaded.fingerprint, quant=label,
                      dtype=dtype, role=VARIANT_ROLE, latency=(curve,), shape=shape_of_network(loaded.model))


def profile_variants(source: str, quants: list[str], drafters, prompts, device: torch.device, settings,
                     dtype: str) -> Profile:
    """The profile of MODEL ``source`` with ``quants[0]`` as the target and the rest as variants.

    Parameters: ``drafters`` are parsed DrafterSpecs, ``prompts`` the calibration prompts,
    ``settings`` a :class:`~specplan.profiler.run.ProfileSettings`.
    Raises: BackendMissingError when a 4-bit method's extra is not installed (before any
    measuring: every backend is checked first).
    """
    quants = normalize_quants(quants)
    for quant in quants:
        if quant != "none":
            require_backend(parse_method(quant))
    target = load_model_variant(source, dtype, str(device), quants[0])
    profile = run_profile(target, drafters, prompts, device, settings)
    label = quant_label(target, quants[0])
    models = [replace(m, quant=label) if m.role == "target" or m.base == "target" else m for m in profile.models]
    context = context_ids_for(target, prompts, profile.calibration["context"])  # as run_profile resolved it
    del target
    for quant in quants[1:]:
        models.append(variant_entry(source, quant, dtype, device, context, settings.repeats, settings.runtime))
    return replace(profile, models=tuple(models))
