"""SKU profiles: a measured profile's acceptance with a named device's roofline latencies.

Acceptance depends on the models and the data, not on the device, so a plan for a device we
do not have keeps the measured acceptance and replaces every model's latency curve with the
roofline T(n) (:mod:`.roofline`) of that model's shape on the SKU from ``planner/data/skus.yaml``.
Retrieval drafters keep their measured cost per call (a host-side table lookup). The result
says where each number came from: ``device.source: roofline``, curves ``source: roofline``.
"""

from __future__ import annotations

import importlib.resources
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from specplan.core.errors import PlanError, ProfileError
from specplan.core.yamlio import read_text_bounded, safe_load_text
from specplan.core.profile import DeviceInfo, ModelEntry, ModelShape, Profile

from .roofline import Calibration, DeviceRoof, precision_for, roofline_curve

# The SKU table ships as package data (planner/data/skus.yaml), read through importlib.resources
# so that an installed wheel finds it as well as a checkout.
SKU_RESOURCE = ("specplan.planner", "data/skus.yaml")

# Published configs of models that profiles name by alias, for profiles recorded before the
# profiler stored shapes. `default` = SmolLM2-135M-Instruct (its config.json: 30 layers,
# hidden 576, 9 heads, 3 KV heads, head_dim 64, intermediate 1536, vocab 49152, tied).
BUILTIN_SHAPES = {
    "default": ModelShape(30, 576, 9, 3, 64, 49152, 1536, True, 134_515_008, "builtin"),
}


def load_skus(path: str | Path | None = None) -> dict[str, DeviceRoof]:
    """Every SKU in ``skus.yaml`` (``schema_version: 1``), by name; PlanError if unreadable."""
    if path is None:
        package, name = SKU_RESOURCE
        resource = importlib.resources.files(package).joinpath(name)
        path, text = Path(str(resource)), resource.read_text(encoding="utf-8")
    else:
        path = Path(path)
        if not path.is_file():
            raise PlanError(f"the SKU table {path} does not exist; pass --skus with an existing file or leave it out")
        text = read_text_bounded(path, "SKU table", PlanError)
    try:
        document = safe_load_text(text)
    except yaml.YAMLError:
        raise PlanError(f"{path} is not valid YAML (or uses aliases); fix it or leave --skus out for the built-in table") from None
    if not isinstance(document, dict) or document.get("schema_version") != 1:
        raise PlanError(f"{path} must be a mapping with schema_version: 1")
    table = document.get("skus")
    if not isinstance(table, dict) or not table:
        raise PlanError(f"{path} has no `skus:` table of devices; pass a SKU table like planner/data/skus.yaml "
                        "or leave --skus out")
    try:
        return {str(name): _sku(str(name), raw) for name, raw in table.items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PlanError(f"{path}: a SKU entry is missing or has a malformed field ({exc})") from None


def _number(value: Any, where: str, positive: bool) -> float:
    """A finite number, > 0 (a peak: bandwidth, tflops) or >= 0 (memory, overheads)."""
    number = float(value)
    if isinstance(value, bool) or not math.isfinite(number) or number < 0 or (positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{where} = {value!r} must be a finite number {bound}")
    return number


def _sku(name: str, raw: dict[str, Any]) -> DeviceRoof:
    overhead = raw.get("overhead") or {}
    tile = raw.get("dequant_tile", 16)
    if isinstance(tile, bool) or not isinstance(tile, int) or tile < 1:
        raise ValueError(f"{name}.dequant_tile = {tile!r} must be a positive integer")
    return DeviceRoof(
        sku=name,
        name=str(raw.get("name", name)),
        kind=str(raw["kind"]),
        bandwidth_gbs=_number(raw["bandwidth_gbs"], f"{name}.bandwidth_gbs", True),
        tflops={str(k): (None if v is None else _number(v, f"{name}.tflops.{k}", True))
                for k, v in (raw.get("tflops") or {}).items()},
        vector_tflops=_number(raw["vector_tflops"], f"{name}.vector_tflops", True),
        memory_gb=_number(raw.get("memory_gb", 0), f"{name}.memory_gb", False),
        overhead_per_forward_us=_number(overhead.get("per_forward_us", 0.0), f"{name}.overhead.per_forward_us", False),
        overhead_per_layer_us=_number(overhead.get("per_layer_us", 0.0), f"{name}.overhead.per_layer_us", False),
        dequant_tile=tile,
        overhead_per_sequence_us=_number(overhead.get("per_sequence_us", 0.0), f"{name}.overhead.per_sequence_us", False),
        source={str(k): str(v) for k, v in (raw.get("source") or {}).items()},
    )


# A CUDA device's name (torch.cuda.get_device_name) -> the SKU table's key. Checked in order,
# so "l40s" comes before "l40" and "l4", and the PCIe A100 before the SXM one. A PCIe H100 has 2.0 TB/s, not the SXM's 3.35: not matched.
DEVICE_NAMES = (("h100 80gb hbm3", "h100-sxm"), ("h100 sxm", "h100-sxm"), ("h200", "h200"), ("a100-sxm4-80gb", "a100-80gb"),
                ("a100 80gb pcie", "a100-80gb-pcie"), ("a100 80gb", "a100-80gb"), ("l40s", "l40s"), ("l40", "l40"),
                ("l4", "l4"), ("rtx 4090", "rtx-4090"), ("rtx 3090", "rtx-3090"))


def sku_of_device_name(name: str) -> str | None:
    """The SKU key of a CUDA device called ``name`` (e.g. "NVIDIA H100 80GB HBM3" -> h100-sxm), or None."""
    lowered = name.lower()
    return next((sku for pattern, sku in DEVICE_NAMES if pattern in lowered), None)


def get_sku(name: str, skus: dict[str, DeviceRoof] | None = None) -> DeviceRoof:
    """The SKU called ``name``; PlanError listing the known ones otherwise."""
    skus = skus if skus is not None else load_skus()
    if name not in skus:
        raise PlanError(f"unknown SKU {name!r}; known: {', '.join(skus)} (or `all`)")
    return skus[name]


def _kept_layers(source: str) -> int | None:
    """How many layers ``layerskip:K`` / ``layerskip:0,2,4`` keeps; None for other sources."""
    kind, _, argument = source.partition(":")
    if kind != "layerskip" or not argument:
        return None
    parts = [part for part in argument.split(",") if part.strip()]
    return len(parts) if len(parts) > 1 else int(parts[0])


def model_shape(profile: Profile, model: ModelEntry) -> ModelShape:
    """The shape of ``model``: recorded, else derived from its base (layer skipping), else a
    builtin config for a known alias; ProfileError saying to re-profile otherwise."""
    kept = _kept_layers(model.source)
    if model.shape is not None:
        return model.shape
    if model.base:
        base = profile.model(model.base)
        if base is not None and kept is not None:
            return replace(model_shape(profile, base), layers=kept, parameters=0)
    if model.source in BUILTIN_SHAPES and kept is None:
        return BUILTIN_SHAPES[model.source]
    raise ProfileError(
        f"model {model.id!r} ({model.source}) has no recorded shape, so its roofline latency cannot be "
        "modelled; re-profile with this version of `specplan profile` (it records model.config)"
    )


def roofline_profile(profile: Profile, device: DeviceRoof, calibration: Calibration | None = None,
                     batches: tuple[int, ...] | None = None) -> Profile:
    """``profile`` with every model's latency replaced by ``device``'s roofline curves.

    One curve per measured context (256 if none was measured) and per batch size: ``batches``,
    or the batch sizes the model was measured at (T(n, b), docs/planner-math.md section 11.1);
    batch 1 is always modelled. Acceptance and retrieval costs are kept. The device is
    recorded as ``DeviceInfo(kind, name, sku, source=roofline)``.
    """
    models = []
    for model in profile.models:
        shape = model_shape(profile, model)
        try:
            precision = precision_for(model.quant, model.dtype)
        except ValueError as exc:
            raise ProfileError(f"model {model.id!r}: {exc}") from None
        contexts = sorted({curve.context for curve in model.latency}) or [256]
        sizes = sorted({1, *(batches if batches is not None else (curve.batch for curve in model.latency))})
        curves = tuple(roofline_curve(shape, precision, context, device, calibration, batch=batch)
                       for batch in sizes for context in contexts)
        models.append(replace(model, latency=curves, shape=shape))
    device_info = DeviceInfo(device.kind, device.name, device.sku, "roofline")
    return replace(profile, device=device_info, models=tuple(models))
