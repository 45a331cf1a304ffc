"""plan.yaml ``schedule``: the best configuration per batch size (docs/formats.md, planner-math.md
section 11). Its own ``schema_version`` inside the key, so a plan without it loads as before and
the key can change without touching the plan's version.

The stages of each row are read and written by :mod:`specplan.core.plan` (passed in as
functions), so that one parser checks every stage list a plan holds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specplan.core.errors import PlanError

if TYPE_CHECKING:
    from specplan.core.plan import Stage

SCHEDULE_VERSION = 1
LARGEST_BATCH = 1 << 20


@dataclass(frozen=True)
class ScheduleRow:
    """The configuration chosen at ``batch`` concurrent sequences and what it is predicted to give.

    ``ms_per_token``: per sequence (L at this batch); ``tokens_per_s``: the whole batch's goodput,
    ``batch * 1000 / ms_per_token`` (SmartSpec, arXiv 2406.14066); ``plain_tokens_per_s``: plain
    decoding of the batch; ``plan_tokens_per_s``: the batch-1 plan's stages run at this batch
    (0 when they cannot be costed here, e.g. a dynamic tree or a model without a curve).
    """

    batch: int
    summary: str
    stages: tuple["Stage", ...]  # bottom to top; () = plain decoding
    ms_per_token: float
    tokens_per_s: float
    plain_tokens_per_s: float
    speedup: float
    accepted_per_target_forward: float
    plan_tokens_per_s: float = 0.0


@dataclass(frozen=True)
class Schedule:
    """Rows by ascending batch; ``crossover_batch``: the smallest scheduled batch from which plain
    decoding is chosen at every larger scheduled batch (None: speculation wins up to the last)."""

    rows: tuple[ScheduleRow, ...]
    crossover_batch: int | None
    source: str = "measured"  # measured | roofline (the latency the rows were costed with)
    schema_version: int = SCHEDULE_VERSION

    def row_for(self, batch: int) -> ScheduleRow:
        """The row of the largest scheduled batch <= ``batch`` (the first row below the smallest)."""
        fitting = [row for row in self.rows if row.batch <= batch]
        return fitting[-1] if fitting else self.rows[0]


PREDICTED_KEYS = ("ms_per_token", "tokens_per_s", "plain_tokens_per_s", "speedup", "accepted_per_target_forward",
                  "plan_tokens_per_s")


def plan_number(value: Any, where: str) -> float:
    """A plan's finite number >= 0 at ``where``; PlanError otherwise (plan.yaml and its schedule)."""
    if isinstance(value, bool):
        raise PlanError(f"{where} = {value!r} is not a number; re-run `specplan plan`")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise PlanError(f"{where} = {value!r} must be a finite number >= 0; re-run `specplan plan`")
    return number


def _batch(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= LARGEST_BATCH:
        raise PlanError(f"{where} = {value!r} must be a whole number from 1 to {LARGEST_BATCH}; re-run `specplan plan`")
    return value


def schedule_from_dict(raw: Any, parse_stages: Callable[[Any], tuple["Stage", ...]]) -> Schedule | None:
    """The schedule of a plan document (None when the key is absent); PlanError names a bad field."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("rows"), list) or not raw["rows"]:
        raise PlanError("schedule must be a mapping with a non-empty `rows` list; re-run `specplan plan`")
    if raw.get("schema_version") != SCHEDULE_VERSION:
        raise PlanError(f"schedule has schema_version {raw.get('schema_version')!r}, this specplan reads "
                        f"{SCHEDULE_VERSION}; re-run `specplan plan`")
    rows = []
    for index, item in enumerate(raw["rows"]):
        where = f"schedule.rows[{index}]"
        predicted = item.get("predicted") or {}
        rows.append(ScheduleRow(
            batch=_batch(item.get("batch"), f"{where}.batch"),
            summary=str(item.get("summary", "")),
            stages=parse_stages(item.get("stages")),
            **{key: plan_number(predicted.get(key, 0.0), f"{where}.predicted.{key}") for key in PREDICTED_KEYS},
        ))
    batches = [row.batch for row in rows]
    if batches != sorted(set(batches)):
        raise PlanError(f"schedule batches {batches} must be strictly increasing; re-run `specplan plan`")
    crossover = raw.get("crossover_batch")
    if crossover is not None and _batch(crossover, "schedule.crossover_batch") not in batches:
        raise PlanError(f"schedule.crossover_batch {crossover} is not one of its batches {batches}; re-run `specplan plan`")
    return Schedule(tuple(rows), crossover, str(raw.get("source", "measured")))


def schedule_to_dict(schedule: Schedule, stage_dicts: Callable[[tuple["Stage", ...]], list[dict]]) -> dict[str, Any]:
    """The YAML mapping of a schedule, ``schema_version`` first."""
    return {
        "schema_version": schedule.schema_version,
        "source": schedule.source,
        "crossover_batch": schedule.crossover_batch,
        "rows": [{"batch": row.batch, "summary": row.summary, "stages": stage_dicts(row.stages),
                  "predicted": {key: round(getattr(row, key), 4) for key in PREDICTED_KEYS}}
                 for row in schedule.rows],
    }
