"""``specplan roofline PROFILE``: the roofline latency model's error per n against measured curves."""

from __future__ import annotations

import json
from dataclasses import asdict

from specplan.core.errors import SpecplanError
from specplan.core.files import write_text_atomic
from specplan.core.outputs import check_output_file
from specplan.core.profile import load_profile
from specplan.planner.hardware.calibration import compare_roofline, fit_calibration
from specplan.planner.hardware.roofline import Calibration
from specplan.planner.hardware.sku import get_sku, load_skus


def add_parser(commands) -> None:
    parser = commands.add_parser("roofline", help="the roofline latency model's error per n against a measured profile")
    parser.add_argument("profile", help="profile.yaml measured by `specplan profile`")
    parser.add_argument("--sku", default=None, help="SKU whose figures describe the measuring device (default: its sku)")
    parser.add_argument("--fit", action="store_true", help="also fit efficiencies and overheads and show the fitted error")
    parser.add_argument("--save-calibration", default=None, metavar="FILE", help="with --fit: write the fit as JSON")
    parser.add_argument("--skus", default=None, metavar="FILE", help="SKU table (default: planner/data/skus.yaml)")
    parser.set_defaults(handler="roofline")



def command(args) -> int:
    """``specplan roofline PROFILE``: the roofline's error per n against the measured curves."""
    if args.save_calibration:
        if not args.fit:
            raise SpecplanError("--save-calibration writes the fitted calibration; add --fit")
        check_output_file(args.save_calibration, kind="other", flag="--save-calibration",
                          inputs=[args.profile] + ([args.skus] if args.skus else []))
    profile = load_profile(args.profile)
    skus = load_skus(args.skus)
    device = get_sku(args.sku or profile.device.sku, skus)
    floor = compare_roofline(profile, device, Calibration(overhead_per_forward_us=0.0, overhead_per_layer_us=0.0))
    assumed = compare_roofline(profile, device)
    fitted_calibration = fit_calibration(profile, device, label=str(args.profile)) if args.fit else None
    fitted = compare_roofline(profile, device, fitted_calibration) if args.fit else None
    columns = [("floor", floor), ("roofline", assumed)] + ([("fitted", fitted)] if fitted else [])
    header = f"{'model':<16} {'quant':<12} {'ctx':>5} {'b':>3} {'n':>4} {'measured':>9}" + "".join(
        f" {name:>9} {'error':>8}" for name, _ in columns)
    print(f"roofline of {device.sku} ({device.name}) vs {args.profile} (measured on {profile.device.sku}); "
          "ms per forward; error = (model - measured) / measured")
    print("floor = max(bytes/bandwidth, flops/compute) at peak; roofline = floor + the SKU's assumed overhead"
          + ("; fitted = efficiencies and overheads fitted to these points" if fitted else ""))
    print(header)
    quant = {m.id: (m.quant if m.quant != "none" else m.dtype) for m in profile.models}
    for index, point in enumerate(assumed):
        line = (f"{point.model:<16} {quant[point.model]:<12} {point.context:>5} {point.batch:>3} {point.n:>4} "
                f"{point.measured_ms:>9.2f}")
        for _, points in columns:
            line += f" {points[index].roofline_ms:>9.2f} {points[index].error:>+8.1%}"
        print(line)
    if fitted_calibration is not None:
        c = fitted_calibration
        print(f"fitted: bandwidth efficiency {c.bandwidth_efficiency:.3f}, compute efficiency "
              f"{c.compute_efficiency:.3f}, overhead {c.overhead_per_forward_us / 1e3:.2f} ms per forward + "
              f"{c.overhead_per_layer_us / 1e3:.3f} ms per layer")
        if args.save_calibration:
            write_text_atomic(args.save_calibration, json.dumps(asdict(c), indent=1) + "\n")
            print(f"specplan: wrote {args.save_calibration}")
    return 0

