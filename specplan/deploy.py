"""Deployment commands: plans for a named GPU SKU (``plan --sku``), the roofline's error
against a measured profile (``roofline``) and configurations for serving engines (``export``).

No torch: everything here is the pure planner plus file I/O. Bad input (an unknown SKU or
engine, a profile without model shapes) is a SpecplanError: one line, exit code 2.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

from specplan.errors import PlanError, SpecplanError
from specplan.plan import save_plan
from specplan.profile import Profile, load_profile, save_profile
from specplan.yamlio import file_sha256

MODELLED_PROFILE = "roofline-profile.yaml"  # beside each SKU plan; never the measured profile.yaml


def _options(args, temperature: float):
    from specplan.planner import PlanOptions

    if args.max_budget < 1 or args.max_depth < 1:
        raise PlanError("--max-budget and --max-depth must be at least 1")
    return PlanOptions(max_budget=args.max_budget, max_depth=args.max_depth,
                       gammas=tuple(range(1, args.max_depth + 1)), temperature=temperature)


def _calibration(args, profile: Profile, skus: dict, sku: str):
    """The roofline calibration the flags ask for: --efficiency E, --fit-efficiency, or none."""
    from specplan.planner.calibration import fit_calibration, transfer
    from specplan.planner.roofline import Calibration

    if getattr(args, "efficiency", None) is not None:
        if not 0 < args.efficiency <= 1:
            raise SpecplanError(f"--efficiency must be a fraction of peak in (0, 1], got {args.efficiency}")
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
    from specplan.planner.sku import roofline_profile
    from specplan.planner.sku_plans import calibration_record, plan_for_sku

    calibration = _calibration(args, profile, skus, sku_name)
    modelled = roofline_profile(profile, skus[sku_name], calibration)
    provenance = {"measured_profile": os.path.relpath(profile_path.resolve(), plan_path.resolve().parent),
                  "measured_sha256": file_sha256(profile_path), "sku": sku_name,
                  "calibration": calibration_record(calibration),
                  "kept_measured": "acceptance and retrieval ms_per_call (host-side lookups) as measured"}
    modelled = replace(modelled, calibration={**modelled.calibration, "roofline": provenance})
    plan_path.parent.mkdir(parents=True, exist_ok=True)
    modelled_path = plan_path.with_name(MODELLED_PROFILE)
    save_profile(modelled, modelled_path)
    row = plan_for_sku(profile, skus[sku_name], _options(args, args.temperature), calibration,
                       profile_path=MODELLED_PROFILE,
                       profile_sha256=file_sha256(modelled_path))
    save_plan(row.result.plan, plan_path)
    return row


def command_plan_sku(args) -> int:
    """``specplan plan PROFILE --sku NAME|all``: modelled plans from the SKU table."""
    from specplan.planner.sku import get_sku, load_skus
    from specplan.planner.sku_plans import summary_table

    if not args.sku:
        raise SpecplanError("--efficiency and --fit-efficiency apply to SKU plans; add --sku NAME (or --sku all)")
    if args.efficiency is not None and args.fit_efficiency:
        raise SpecplanError("give either --efficiency E or --fit-efficiency, not both")
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
    rows = []
    for name, plan_path in targets.items():
        row = _write_sku_plan(profile, profile_path, name, skus, plan_path, args)
        rows.append(row)
        predicted = row.result.plan.predicted
        print(f"specplan: wrote {plan_path} (modelled: roofline of {name}): {row.result.plan.summary()}; "
              f"predicted {predicted.tokens_per_s:.1f} tok/s, {predicted.speedup:.2f}x over plain decoding")
        if args.explain:
            from specplan.planner import explain

            print(explain(row.result))
    if folder is not None:
        table = summary_table(rows)
        (folder / "summary.md").write_text(
            f"# Plans per SKU from {profile_path} (modelled: measured acceptance, roofline latency)\n\n{table}\n",
            encoding="utf-8")
        print(table)
        print(f"specplan: wrote {folder / 'summary.md'}")
    return 0


def command_roofline(args) -> int:
    """``specplan roofline PROFILE``: the roofline's error per n against the measured curves."""
    from specplan.planner.calibration import compare_roofline, fit_calibration
    from specplan.planner.roofline import Calibration
    from specplan.planner.sku import get_sku, load_skus

    profile = load_profile(args.profile)
    skus = load_skus(args.skus)
    device = get_sku(args.sku or profile.device.sku, skus)
    floor = compare_roofline(profile, device, Calibration(overhead_per_forward_us=0.0, overhead_per_layer_us=0.0))
    assumed = compare_roofline(profile, device)
    fitted_calibration = fit_calibration(profile, device, label=str(args.profile)) if args.fit else None
    fitted = compare_roofline(profile, device, fitted_calibration) if args.fit else None
    columns = [("floor", floor), ("roofline", assumed)] + ([("fitted", fitted)] if fitted else [])
    header = f"{'model':<16} {'quant':<12} {'ctx':>5} {'n':>4} {'measured':>9}" + "".join(
        f" {name:>9} {'error':>8}" for name, _ in columns)
    print(f"roofline of {device.sku} ({device.name}) vs {args.profile} (measured on {profile.device.sku}); "
          "ms per forward; error = (model - measured) / measured")
    print("floor = max(bytes/bandwidth, flops/compute) at peak; roofline = floor + the SKU's assumed overhead"
          + ("; fitted = efficiencies and overheads fitted to these points" if fitted else ""))
    print(header)
    quant = {m.id: (m.quant if m.quant != "none" else m.dtype) for m in profile.models}
    for index, point in enumerate(assumed):
        line = f"{point.model:<16} {quant[point.model]:<12} {point.context:>5} {point.n:>4} {point.measured_ms:>9.2f}"
        for _, points in columns:
            line += f" {points[index].roofline_ms:>9.2f} {points[index].error:>+8.1%}"
        print(line)
    if fitted_calibration is not None:
        c = fitted_calibration
        print(f"fitted: bandwidth efficiency {c.bandwidth_efficiency:.3f}, compute efficiency "
              f"{c.compute_efficiency:.3f}, overhead {c.overhead_per_forward_us / 1e3:.2f} ms per forward + "
              f"{c.overhead_per_layer_us / 1e3:.3f} ms per layer")
        if args.save_calibration:
            Path(args.save_calibration).write_text(json.dumps(asdict(c), indent=1) + "\n", encoding="utf-8")
            print(f"specplan: wrote {args.save_calibration}")
    return 0


def command_export(args) -> int:
    """``specplan export PLAN --engine E``: the engine's own config on stdout, the story on stderr."""
    from specplan.commands import load_plan_and_profile
    from specplan.planner.export import describe, engine_support, export_plan

    engine_support(args.engine)  # an unknown engine fails before any file is read
    plan, profile, profile_path = load_plan_and_profile(args.plan)
    options = _options(args, plan.temperature)
    result = export_plan(profile, args.engine, options, profile_path=str(profile_path),
                         profile_sha256=file_sha256(profile_path))
    lines = describe(result)
    if plan.device.get("source") == "roofline":
        lines.insert(0, f"latencies modelled for {plan.device.get('sku')} (roofline), acceptance measured")
    if args.json:
        print(json.dumps({
            "engine": result.engine, "config": result.config, "plan": str(args.plan),
            "engine_plan": result.restricted.plan.summary(),
            "engine_ms_per_token": result.restricted.plan.predicted.ms_per_token,
            "engine_speedup": result.restricted.plan.predicted.speedup,
            "unrestricted_plan": result.unrestricted.plan.summary(),
            "unrestricted_ms_per_token": result.unrestricted.plan.predicted.ms_per_token,
            "loss": result.loss, "left_out": list(result.excluded), "notes": list(result.notes),
        }))
    else:
        print(result.config)
    for line in lines:
        sys.stderr.write(f"specplan: {line}\n")
    return 0
