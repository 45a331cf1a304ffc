"""The GPU check's report: latency-only curves per shape and runtime, the roofline's
error per n against them, eager vs compiled (CUDA graphs) T(1), and the CUDA tests' summary.

``python -m specplan.bench.gpu_report OUTDIR`` reads what ``scripts/gpu-check.sh`` wrote into
OUTDIR (``latency-SHAPE-RUNTIME.yaml``, ``default/profile.yaml``, ``cuda-tests.log``) and writes
``report.md`` and ``report.json`` there. The roofline is planner/hardware/roofline.py's model of the
SKU the profile names (docs/planner-math.md section 7); its fit is planner/hardware/calibration.py's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from specplan.core.errors import SpecplanError
from specplan.core.files import write_text_atomic
from specplan.core.profile import Profile, load_profile
from specplan.planner.hardware.calibration import compare_roofline, fit_calibration
from specplan.planner.hardware.sku import get_sku, load_skus


def _roofline_rows(profile: Profile, sku: str) -> list[dict]:
    """Per model, batch and n: measured ms, the SKU's roofline ms and its error, and the fitted one's."""
    device = get_sku(sku, load_skus())
    assumed = compare_roofline(profile, device)
    fitted = compare_roofline(profile, device, fit_calibration(profile, device)) if len(assumed) >= 4 else assumed
    return [{"model": a.model, "batch": a.batch, "n": a.n, "measured_ms": round(a.measured_ms, 4), "roofline_ms": round(a.roofline_ms, 4),
             "error": round(a.error, 4), "fitted_ms": round(f.roofline_ms, 4), "fitted_error": round(f.error, 4)}
            for a, f in zip(assumed, fitted)]


def _entry(path: Path, sku: str | None) -> dict:
    profile = load_profile(path)
    target = profile.target
    curve = target.latency[0]
    entry = {"file": path.name, "model": target.source, "mode": target.mode, "device": profile.device.name,
             "sku": profile.device.sku, "n": list(curve.n), "ms": list(curve.ms),
             "sources": profile.calibration.get("sources", {})}
    chosen = sku or profile.device.sku
    try:
        entry["roofline"] = _roofline_rows(profile, chosen)
        entry["roofline_sku"] = chosen
    except SpecplanError as error:
        entry["roofline"], entry["roofline_error"] = [], str(error)
    return entry


def _graphs_vs_eager(entries: list[dict]) -> list[dict]:
    """T(1) eager vs compiled for every model measured both ways."""
    by_model: dict[str, dict[str, float]] = {}
    for entry in entries:
        by_model.setdefault(entry["model"], {})[entry["mode"]] = entry["ms"][0]
    return [{"model": model, "eager_t1_ms": modes["eager"], "compiled_t1_ms": modes["compiled"],
             "ratio": round(modes["eager"] / modes["compiled"], 3)}
            for model, modes in by_model.items() if "eager" in modes and "compiled" in modes]


def build_report(folder: Path, sku: str | None = None) -> dict:
    profiles = sorted(folder.glob("latency-*.yaml")) + sorted(folder.glob("default/profile.yaml"))
    entries = [_entry(path, sku) for path in profiles]
    log = folder / "cuda-tests.log"
    tests = log.read_text(errors="replace").strip().splitlines()[-1] if log.is_file() and log.stat().st_size else "not run"
    return {"cuda_tests": tests, "profiles": entries, "graphs_vs_eager": _graphs_vs_eager(entries)}


def render_markdown(report: dict) -> str:
    lines = ["# GPU check", "", f"CUDA tests: {report['cuda_tests']}", ""]
    if report["graphs_vs_eager"]:
        lines += ["| model | eager T(1) ms | compiled (CUDA graphs) T(1) ms | eager / compiled |", "|---|---:|---:|---:|"]
        lines += [f"| {r['model']} | {r['eager_t1_ms']:.3f} | {r['compiled_t1_ms']:.3f} | {r['ratio']:.2f} |"
                  for r in report["graphs_vs_eager"]]
        lines.append("")
    for entry in report["profiles"]:
        lines += [f"## {entry['model']} ({entry['mode']}, {entry['file']})", "",
                  f"Device: {entry['device']} (SKU {entry['sku']}). " + "; ".join(
                      f"{key}: {value}" for key, value in entry["sources"].items()), ""]
        if not entry["roofline"]:
            lines += [f"Roofline: not compared ({entry.get('roofline_error', 'no points')})", ""]
            continue
        lines += [f"| model | batch | n | measured ms | roofline ({entry['roofline_sku']}) ms | error | fitted ms | fitted error |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['model']} | {r['batch']} | {r['n']} | {r['measured_ms']:.3f} | {r['roofline_ms']:.3f} | {r['error']:+.1%} | "
                  f"{r['fitted_ms']:.3f} | {r['fitted_error']:+.1%} |" for r in entry["roofline"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or not Path(argv[0]).is_dir():
        print("specplan: gpu-report: give the folder scripts/gpu-check.sh wrote (and optionally a SKU)", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    try:
        report = build_report(folder, argv[1] if len(argv) > 1 else None)
    except SpecplanError as error:
        print(f"specplan: gpu-report: {error}", file=sys.stderr)
        return 2
    write_text_atomic(folder / "report.json", json.dumps(report, indent=1) + "\n")
    write_text_atomic(folder / "report.md", render_markdown(report))
    print(f"specplan: wrote {folder / 'report.md'} and {folder / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
