"""Published settings: what a paper or engine measured for speculation on a named GPU, one per file.

``specplan predict`` holds the roofline and the planner against these (docs/formats.md,
"Published settings"; docs/planner-math.md, section 13). The format is fixed so that others can
write files for settings this project never saw: exactly the keys below, ``schema_version: 1``::

    schema_version: 1
    name: sequoia-a100-llama2-7b-c4-t0
    source: "Sequoia (arXiv 2402.12374), Table 1"
    sku: a100-80gb-pcie
    batch: 1
    target: {arch: llama-2-7b, precision: fp16}
    drafter: {arch: jf68m, precision: fp16}      # or {kind: ngram} or {kind: head, arch: eagle-head-llama-2-7b}
    acceptance: {position_rates: [0.79, 0.74]}   # or {tau: 5.08}: tokens per target forward at measured.shape
    measured:
      shape: {kind: tree, budget: 128, depth: 10}  # or {kind: sequence, gamma: 5}
      speedup: 4.04
      baseline_ms_per_token: 24.2                  # optional

This module checks the structure and the numbers; whether ``sku``, ``arch`` and ``precision``
name something known is checked where the tables live (the API's :mod:`specplan.predict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specplan.core.errors import SettingError
from specplan.core.limits import MAX_DEPTH, MAX_TREE_BUDGET, check_count
from specplan.core.yamlio import AliasError, read_text_bounded, safe_load_text

PRECISION_NAMES = ("fp16", "bf16", "w8a8", "w4a16", "w4a8")
LARGEST_BATCH = 4096
TOP_KEYS = ("schema_version", "name", "source", "sku", "batch", "target", "drafter", "acceptance", "measured")


@dataclass(frozen=True)
class ModelRef:
    """A model of a setting: ``kind`` model (a decoder), head (an EAGLE-style head) or ngram."""

    kind: str
    arch: str = ""
    precision: str = "fp16"


@dataclass(frozen=True)
class MeasuredShape:
    """The draft shape the source measured: a tree (``budget`` nodes, ``depth``) or a chain of ``gamma``."""

    kind: str  # tree | sequence
    budget: int = 0
    depth: int = 0
    gamma: int = 0

    @property
    def record(self) -> dict[str, Any]:
        """The shape as the file and ``predict --json`` write it."""
        if self.kind == "tree":
            return {"kind": "tree", "budget": self.budget, "depth": self.depth}
        return {"kind": "sequence", "gamma": self.gamma}

    @property
    def label(self) -> str:
        return shape_label(self.record)


def shape_label(record: dict[str, Any]) -> str:
    """``tree 64/6``, ``chain 3`` or ``plain`` for a shape record (``MeasuredShape.record`` or a
    ``chosen_shape``).

    >>> shape_label({"kind": "tree", "budget": 64, "depth": 6}), shape_label({"kind": "plain"})
    ('tree 64/6', 'plain')
    """
    if record["kind"] == "tree":
        return f"tree {record['budget']}/{record['depth']}"
    return f"chain {record['gamma']}" if record["kind"] == "sequence" else "plain"


@dataclass(frozen=True)
class PublishedSetting:
    """One published result: device, batch, models, acceptance, the shape measured and its speedup."""

    name: str
    source: str
    sku: str
    batch: int
    target: ModelRef
    drafter: ModelRef
    shape: MeasuredShape
    speedup: float
    position_rates: tuple[float, ...] = ()  # exactly one of position_rates and tau is given
    tau: float = 0.0
    baseline_ms_per_token: float = 0.0  # 0: not given
    path: str = ""


def _mapping(raw: Any, where: str, allowed: tuple[str, ...], required: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise SettingError(f"{where} must be a mapping with keys {', '.join(allowed)}")
    unknown = [str(key) for key in raw if key not in allowed]
    if unknown:
        raise SettingError(f"{where} has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    missing = [key for key in required if key not in raw]
    if missing:
        raise SettingError(f"{where} lacks {', '.join(missing)}")
    return raw


def _number(value: Any, where: str, low: float, high: float = math.inf, open_low: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SettingError(f"{where} must be a number, got {value!r}")
    if value < low or (open_low and value == low) or value > high:
        bound = f"{'>' if open_low else '>='} {low}" + (f" and <= {high}" if math.isfinite(high) else "")
        raise SettingError(f"{where} = {value} is out of range; it must be {bound}")
    return float(value)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SettingError(f"{where} must be a non-empty string, got {value!r}")
    return value.strip()


def _count(value: Any, where: str, high: int) -> int:
    try:
        return check_count(value, where, 1, high)
    except ValueError as exc:
        raise SettingError(str(exc)) from None


def _precision(raw: dict[str, Any], where: str) -> str:
    precision = raw.get("precision", "fp16")
    if precision not in PRECISION_NAMES:
        raise SettingError(f"{where}.precision {precision!r} is not one of {', '.join(PRECISION_NAMES)}")
    return precision


def _target(raw: Any) -> ModelRef:
    fields = _mapping(raw, "target", ("arch", "precision"), ("arch", "precision"))
    return ModelRef("model", _text(fields["arch"], "target.arch"), _precision(fields, "target"))


def _drafter(raw: Any) -> ModelRef:
    fields = _mapping(raw, "drafter", ("kind", "arch", "precision"), ())
    kind = fields.get("kind", "model")
    if kind == "ngram":
        _mapping(fields, "drafter (kind: ngram)", ("kind",), ())
        return ModelRef("ngram")
    if kind not in ("model", "head"):
        raise SettingError(f"drafter.kind {kind!r} is not one of model, head, ngram")
    if "arch" not in fields:
        raise SettingError("drafter lacks arch (a named shape, a config.json path, or an eagle-head-<shape>)")
    return ModelRef(kind, _text(fields["arch"], "drafter.arch"), _precision(fields, "drafter"))


def _acceptance(raw: Any) -> tuple[tuple[float, ...], float]:
    fields = _mapping(raw, "acceptance", ("position_rates", "tau"), ())
    if len(fields) != 1:
        raise SettingError("acceptance must give exactly one of position_rates (a list) and tau (a number)")
    if "tau" in fields:
        return (), _number(fields["tau"], "acceptance.tau", 1.0, float(MAX_TREE_BUDGET), open_low=False)
    rates = fields["position_rates"]
    if not isinstance(rates, list) or not 1 <= len(rates) <= MAX_DEPTH:
        raise SettingError(f"acceptance.position_rates must be a list of 1 to {MAX_DEPTH} probabilities")
    return tuple(_number(r, f"acceptance.position_rates[{i}]", 0.0, 1.0, open_low=False)
                 for i, r in enumerate(rates)), 0.0


def _shape(raw: Any) -> MeasuredShape:
    kind = raw.get("kind") if isinstance(raw, dict) else None
    if kind == "tree":
        fields = _mapping(raw, "measured.shape", ("kind", "budget", "depth"), ("budget", "depth"))
        budget = _count(fields["budget"], "measured.shape.budget", MAX_TREE_BUDGET)
        depth = _count(fields["depth"], "measured.shape.depth", MAX_DEPTH)
        if depth >= budget:
            raise SettingError(f"measured.shape: a tree of {budget} nodes (root included) has depth < {budget}, "
                               f"got depth {depth}")
        return MeasuredShape("tree", budget=budget, depth=depth)
    if kind == "sequence":
        fields = _mapping(raw, "measured.shape", ("kind", "gamma"), ("gamma",))
        return MeasuredShape("sequence", gamma=_count(fields["gamma"], "measured.shape.gamma", MAX_DEPTH))
    raise SettingError("measured.shape must be {kind: tree, budget: N, depth: D} or {kind: sequence, gamma: G}")


def setting_from_dict(document: Any, path: str = "") -> PublishedSetting:
    """The checked :class:`PublishedSetting` of a parsed file; :class:`SettingError` with one line otherwise."""
    fields = _mapping(document, "a published setting", TOP_KEYS, TOP_KEYS)
    version = fields["schema_version"]
    if isinstance(version, bool) or version != 1:
        raise SettingError(f"schema_version {version!r}: this specplan reads published settings of schema_version 1")
    measured = _mapping(fields["measured"], "measured", ("shape", "speedup", "baseline_ms_per_token"),
                        ("shape", "speedup"))
    rates, tau = _acceptance(fields["acceptance"])
    shape = _shape(measured["shape"])
    if rates and shape.kind == "sequence" and len(rates) < shape.gamma:
        raise SettingError(f"acceptance.position_rates gives {len(rates)} rates for a chain of {shape.gamma}; "
                           "give one per draft position")
    baseline = measured.get("baseline_ms_per_token")
    return PublishedSetting(
        name=_text(fields["name"], "name"), source=_text(fields["source"], "source"), sku=_text(fields["sku"], "sku"),
        batch=_count(fields["batch"], "batch", LARGEST_BATCH), target=_target(fields["target"]),
        drafter=_drafter(fields["drafter"]), shape=shape,
        speedup=_number(measured["speedup"], "measured.speedup", 0.0, 100.0),
        position_rates=rates, tau=tau,
        baseline_ms_per_token=0.0 if baseline is None else _number(baseline, "measured.baseline_ms_per_token", 0.0),
        path=path)


def load_setting(path: str | Path) -> PublishedSetting:
    """Read and check one published-setting file; every problem is a :class:`SettingError` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise SettingError(f"published setting {path} does not exist; pass a setting .yaml (docs/formats.md)")
    try:
        document = safe_load_text(read_text_bounded(path, "published setting", SettingError))
    except AliasError:
        raise SettingError(f"{path} uses a YAML alias; write the values out") from None
    except (yaml.YAMLError, RecursionError):
        raise SettingError(f"{path} is not valid YAML; fix its syntax (docs/formats.md, \"Published settings\")") from None
    try:
        return setting_from_dict(document, str(path))
    except SettingError as exc:
        raise SettingError(f"{path}: {exc}") from None
