"""The command a user pastes for an engine: the export's config, with a per-batch schedule (vLLM, TensorRT-LLM).

``specplan export`` prints this (docs/guide.md, "Planning for other devices and serving
engines"); ``measurements/export_table.py`` writes it for every stored profile into
docs/exports.md and ``tests/planner/export/test_stored.py`` holds each one to the engine's interface.
The re-solve is :func:`.plan.export_plan` (planner-math.md section 10, ``loss = L_engine /
L_unrestricted - 1``); a profile with T(n, b) at more than batch 1 adds the schedule per batch
size (planner-math.md section 11.3, SmartSpec arXiv 2406.14066): vLLM's
``num_speculative_tokens_per_batch_size`` goes into the command and TensorRT-LLM's
``draft_len_schedule`` into its file, the other engines keep one setting and their loss per batch
is stated.
"""

from __future__ import annotations

from dataclasses import dataclass

from specplan.core.profile import Profile, batch_sizes

from .plan import ExportResult, export_plan
from .models import ModelNames
from .schedule import ScheduleExport, export_schedule, schedule_config
from ..options import PlanOptions
from ..solve import PlanResult


@dataclass(frozen=True)
class PastedExport:
    """The export, its schedule (None for a batch-1 profile) and the command as printed."""

    result: ExportResult
    schedule: ScheduleExport | None
    config: str  # the command that starts the engine; vLLM's and TensorRT-LLM's with the per-batch schedule if any


def pasted_export(profile: Profile, engine: str, options: PlanOptions | None = None, *,
                  names: ModelNames | None = None, profile_path: str = "", profile_sha256: str = "",
                  unrestricted: PlanResult | None = None) -> PastedExport:
    """Export ``profile`` for ``engine`` and build the command a user pastes (see the module).

    ``unrestricted``: the profile's solve under ``options`` when the caller has it (see
    :func:`.plan.export_plan`). Raises PlanError (one line) for an unknown engine or a target
    without a usable latency.
    """
    result = export_plan(profile, engine, options, profile_path=profile_path, profile_sha256=profile_sha256,
                         names=names, unrestricted=unrestricted)
    if len(batch_sizes(profile)) <= 1:
        return PastedExport(result, None, result.config)
    schedule = export_schedule(profile, engine, options, names=names)
    config = schedule_config(result.engine, result.config, schedule.ranges)
    return PastedExport(result, schedule, config)


def not_exportable(profile: Profile) -> str:
    """Why ``profile`` has no command to export (``""`` when it has one).

    A latency-only profile (``specplan profile --latency-only``) times random weights
    of a named shape (``arch:SHAPE``): no engine can load its target, so its export is skipped
    (the planner still solves it, with borrowed acceptance, for a model of that shape).
    """
    if profile.calibration.get("latency_only") or profile.target.source.startswith("arch:"):
        return (f"latency-only profile: its target {profile.target.source!r} is random weights of a named shape, "
                "which no engine loads; export the profile of a real model (`specplan profile MODEL`)")
    return ""
