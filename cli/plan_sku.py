"""``specplan plan PROFILE --sku NAME|all``: plans for a named device from the SKU table:
measured acceptance, roofline latency (docs/guide.md, "Planning for other devices
and serving engines").

No torch: the pure planner plus file I/O. Bad input (an unknown SKU, a profile without model
shapes) is a SpecplanError: one line, exit code 2.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from specplan.core.errors import SpecplanError
from specplan.core.files import write_text_atomic
from specplan.core.outputs import check_output_file, check_output_folder
from specplan.core.plan import save_plan
from specplan.core.profile import Profile, load_profile, save_profile
from specplan.core.yamlio import file_sha256
from specplan.planner import explain
from specplan.planner.hardware.calibration import fit_calibration, transfer
from specplan.planner.options import runtime_options
from specplan.planner.hardware.roofline import Calibration
from specplan.planner.hardware.sku import get_sku, load_skus, roofline_profile
from specplan.planner.hardware.sku_plans import calibration_record, plan_for_sku, sku_batches, summary_table
from specplan.planner.explain_schedule import schedule_table
from specplan.cli.batch_option import parse_batch_sizes


MODELLED_PROFILE = "roofline-profile.yaml"  # beside each SKU plan; never the measured profile.yaml



def _calibration(args, profile: Profile, skus: dict, sku: str):
    """The roofline calibration the flags ask for: --efficiency E, --fit-efficiency, or none."""

    if getattr(args, "efficiency", None) is not None:
        return Calibration(args.efficiency, args.efficiency, source="given")
    if not getattr(args, "fit_efficiency", False):
        return None
    measured_on = profile.device.sku
    if measured_on not in skus or profile.device.source != "measured":
        raise SpecplanError(f"--fit-efficiency needs a profile measured on a SKU of the table (this one: "
                            f"{measured_on}, {profile.device.source}); known: {', '.join(skus)}")
    fitted = fit_calibration(profile, skus[measured_on], label=f"{args.profile}@{measured_on}")
    return fitted if sku == measured_on else transfer(fitted)



def _write_sku_plan(profile: Profile, profile_path: Path, sku_name: str, skus: dict, plan_path: Path, args):

    calibration = _calibration(args, profile, skus, sku_name)
    options = runtime_options(args.max_budget, args.max_depth, args.temperature)
    batches = sku_batches(profile, skus[sku_name], options, parse_batch_sizes(getattr(args, "batch_sizes", None)))
    modelled = roofline_profile(profile, skus[sku_name], calibration, batches)
    provenance = {"measured_profile": os.path.relpath(profile_path.resolve(), plan_path.resolve().parent),
                  "measured_sha256": file_sha256(profile_path), "sku": sku_name,
                  "calibration": calibration_record(calibration),
                  "kept_measured": "acceptance and retrieval ms_per_call (host-side lookups) as measured"}
    modelled = replace(modelled, calibration={**modelled.calibration, "roofline": provenance})
    modelled_path = plan_path.with_name(MODELLED_PROFILE)
    save_profile(modelled, modelled_path)
    row = plan_for_sku(profile, skus[sku_name], options, calibration, profile_path=MODELLED_PROFILE,
                       profile_sha256=file_sha256(modelled_path), batches=batches)
    save_plan(row.result.plan, plan_path)
    return row



def _check_targets(targets: dict[str, Path], folder: Path | None, profile_path: Path) -> None:
    """Every plan, modelled profile and summary location, before any plan is solved."""
    if folder is not None:
        check_output_folder(folder, flag="-o")
    for plan_path in targets.values():
        if plan_path.name == MODELLED_PROFILE:
            raise SpecplanError(f"-o {plan_path}: {MODELLED_PROFILE} is where the modelled profile beside the plan "
                                "goes; name the plan something else (e.g. plan.yaml)")
        check_output_file(plan_path, kind="plan", inputs=[profile_path])
        check_output_file(plan_path.with_name(MODELLED_PROFILE), kind="profile", flag="the modelled profile",
                          inputs=[profile_path])


def command_plan_sku(args) -> int:
    """``specplan plan PROFILE --sku NAME|all``: modelled plans from the SKU table."""

    if not args.sku:
        raise SpecplanError("--efficiency and --fit-efficiency apply to SKU plans; add --sku NAME (or --sku all)")
    if args.efficiency is not None and args.fit_efficiency:
        raise SpecplanError("give either --efficiency E or --fit-efficiency, not both")
    runtime_options(args.max_budget, args.max_depth, args.temperature)  # bounds first: one line, no work
    parse_batch_sizes(getattr(args, "batch_sizes", None))
    profile_path = Path(args.profile)
    profile = load_profile(profile_path)
    skus = load_skus(args.skus)
    names = list(skus) if args.sku == "all" else [get_sku(args.sku, skus).sku]
    if args.sku == "all":
        folder = Path(args.output) if args.output else profile_path.parent / "sku-plans"
        targets = {name: folder / name / "plan.yaml" for name in names}
    else:
        folder = None
        default = profile_path.parent / names[0] / "plan.yaml"
        targets = {names[0]: Path(args.output) if args.output else default}
    _check_targets(targets, folder, profile_path)
    rows = []
    for name, plan_path in targets.items():
        row = _write_sku_plan(profile, profile_path, name, skus, plan_path, args)
        rows.append(row)
        predicted = row.result.plan.predicted
        print(f"specplan: wrote {plan_path} (modelled: roofline of {name}): {row.result.plan.summary()}; "
              f"predicted {predicted.tokens_per_s:.1f} tok/s, {predicted.speedup:.2f}x over plain decoding")
        if args.explain:
            print(explain(row.result))
            if row.result.plan.schedule is not None:
                print(schedule_table(row.result.plan.schedule))
    if folder is not None:
        table = summary_table(rows)
        write_text_atomic(folder / "summary.md",
                          f"# Plans per SKU from {profile_path} (modelled: measured acceptance, roofline latency)\n\n{table}\n")
        print(table)
        print(f"specplan: wrote {folder / 'summary.md'}")
    return 0

