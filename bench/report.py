"""The bench's report: every number in ``report.json``, the tables in ``report.md``.

``report.json`` keys: ``schema_version``, ``meta`` (plan, dtype, device, threads, settings,
versions), ``methods`` (name, kind, description, settings), ``reference`` (the method that
speedups and the lossless check refer to), ``overall`` and ``categories`` (method ->
aggregate, see :func:`~specplan.bench.metrics.aggregate`), ``headline`` (per
category: the plan's speedup over plain and its ratio to the best transformers peer),
``rows`` (one per prompt and method), ``grid`` (points with predicted and measured terms,
and their rows), ``plan_quality``, ``lossless``, ``notes``, ``plots``.

Schema 2: a grid point is identified by its ``stages`` (bottom first, as in plan.yaml; [] =
plain decoding) and ``kind`` (plain | sequence | tree | hierarchy) instead of one drafter and
gamma, so that trees and hierarchies are points too.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specplan.core.files import write_text_atomic
from specplan.core.plan import Stage
from specplan.bench.metrics import Row, aggregate, finite_or_none, lossless_verdict

SCHEMA_VERSION = 2
PEERS = ("hf-assisted", "hf-lookup")


def _finite(value):
    """The document with NaN and infinities replaced by None (JSON has neither)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def stage_record(stage: Stage) -> dict:
    """A stage as plan.yaml writes it: drafter, verifier and the shape's set fields."""
    shape = {key: list(value) if isinstance(value, tuple) else value
             for key, value in asdict(stage.shape).items() if value not in (0, False, (), "")}
    return {"drafter": stage.drafter, "verifier": stage.verifier, "shape": {"kind": stage.shape.kind, **shape}}


def point_kind(stages: tuple[Stage, ...]) -> str:
    """plain | sequence | tree | hierarchy."""
    if not stages:
        return "plain"
    return "hierarchy" if len(stages) > 1 else stages[0].shape.kind


@dataclass
class BenchReport:
    meta: dict
    methods: list[dict]
    reference: str
    rows: list[Row] = field(default_factory=list)
    grid: dict[str, dict] = field(default_factory=dict)  # point name -> {"point": GridPoint, "measured": dict | None}
    grid_rows: list[Row] = field(default_factory=list)
    grid_reference: str | None = None
    quality: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)

    # ---- aggregates -------------------------------------------------------------------
    def method_names(self) -> list[str]:
        return [m["name"] for m in self.methods]

    def plan_method(self) -> str:
        return next(m["name"] for m in self.methods if m["kind"] == "plan")

    def categories(self) -> list[str]:
        return sorted({row.category for row in self.rows})

    def _rows(self, method: str, category: str | None = None, rows: list[Row] | None = None) -> list[Row]:
        rows = self.rows if rows is None else rows
        return [r for r in rows if r.method == method and (category is None or r.category == category)]

    def aggregates(self, category: str | None = None) -> dict[str, dict]:
        dtype = self.meta["dtype"]
        return {name: aggregate(self._rows(name, category), self._rows(self.reference, category), dtype)
                for name in self.method_names()}

    def headline(self) -> dict[str, dict]:
        """Per category (and ``all``): the plan's speedup over plain and its ratio to the best peer."""
        result = {}
        for category in self.categories() + [None]:
            table = self.aggregates(category)
            plan = table[self.plan_method()]
            peers = {name: table[name]["tokens_per_s"] for name in PEERS if table.get(name, {}).get("prompts")}
            best = max(peers, key=peers.get) if peers else None
            result[category or "all"] = {
                "plan_tokens_per_s": plan["tokens_per_s"],
                "plain_tokens_per_s": table[self.reference]["tokens_per_s"],
                "speedup_over_plain": plan["speedup"],
                "speedup_interval": plan.get("speedup_interval"),  # its spread over the prompts
                "best_peer": best,
                "best_peer_tokens_per_s": peers.get(best) if best else None,
                "ratio_to_best_peer": round(plan["tokens_per_s"] / peers[best], 4) if best and peers[best] else None,
                "mean_accepted": plan["mean_accepted"],
                "lossless": plan["lossless"],
            }
        return result

    def lossless(self) -> dict[str, dict]:
        """Per method: the verdict, and whether it is ``required`` (not for another engine's kernels)."""
        result = {}
        for method in self.methods:
            name = method["name"]
            checks = [r.check for r in self._rows(name) if r.check is not None]
            ok, text = lossless_verdict(checks, self.meta["dtype"]) if checks else (None, "not checked")
            parted = [r for r in self._rows(name) if r.check is not None and not r.check.identical]
            parted.sort(key=lambda r: r.check.near_tie)  # the divergences past a near-tie first
            result[name] = {"ok": ok, "detail": text, "required": method["kind"] != "engine", "divergences": [
                {"prompt_id": r.prompt_id, "index": r.check.index, "gap": finite_or_none(r.check.gap),
                 "flip_width": r.check.flip_width} for r in parted]}
        return result

    def grid_table(self) -> list[dict]:
        table = []
        for name, entry in self.grid.items():
            point, measured = entry["point"], entry.get("measured")
            rows = self._rows(name, rows=self.grid_rows)
            reference = self._rows(self.grid_reference or "", rows=self.grid_rows)
            agg = aggregate(rows, reference, self.meta["dtype"]) if rows else {}
            decode = measured.get("decode_tokens_per_s") if measured else None
            table.append({
                "name": name, "summary": point.summary, "kind": point_kind(point.stages),
                "stages": [stage_record(stage) for stage in point.stages], "roles": list(point.roles),
                "predicted": {k: finite_or_none(v) for k, v in asdict(point.predicted).items()},
                "predicted_tokens_per_s": round(point.predicted.tokens_per_s, 3),
                "measured_tokens_per_s": agg.get("tokens_per_s"),
                "measured_decode_tokens_per_s": finite_or_none(decode, 3),
                "predicted_over_measured": round(point.predicted.tokens_per_s / decode, 4) if decode else None,
                "speedup": agg.get("speedup"), "mean_accepted": agg.get("mean_accepted"),
                "overhead_share": agg.get("overhead_share"), "lossless": agg.get("lossless"),
                "measured_terms": {k: finite_or_none(v) for k, v in (measured or {}).items()},
            })
        return table

    # ---- output -----------------------------------------------------------------------
    def to_dict(self) -> dict:
        categories = {c: self.aggregates(c) for c in self.categories()}
        return {
            "schema_version": SCHEMA_VERSION,
            "meta": self.meta,
            "methods": self.methods,
            "reference": self.reference,
            "overall": self.aggregates(),
            "categories": categories,
            "headline": self.headline(),
            "lossless": self.lossless(),
            "plan_quality": self.quality,
            "grid": {"reference": self.grid_reference, "points": self.grid_table(),
                     "prompts": sorted({r.prompt_id for r in self.grid_rows}, key=str),
                     "rows": [r.to_dict() for r in self.grid_rows]},
            "rows": [r.to_dict() for r in self.rows],
            "notes": self.notes,
            "plots": self.plots,
        }

    def write(self, folder: Path) -> None:
        """report.json and report.md, each written atomically (core/files.py)."""
        write_text_atomic(folder / "report.json", json.dumps(_finite(self.to_dict()), indent=1, allow_nan=False) + "\n")
        write_text_atomic(folder / "report.md", self.markdown() + "\n")

    def markdown(self) -> str:
        from specplan.bench.markdown import render

        return render(self)

