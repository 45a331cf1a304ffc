"""Write docs/exports.md: for every stored profile (profiles/*/profile.yaml) and every engine, the
command a user pastes and the loss the export states (planner-math.md section 10: ``loss =
L_engine / L_unrestricted - 1``; section 11.3 for a profile with T(n, b)).

Each profile is exported as ``specplan export`` does (:func:`specplan.planner.export.pasted.pasted_export`,
budget 64, depth 8, temperature 0), naming the models without looking for files on this machine,
so the page is the same wherever it is generated. tests/planner/export/test_stored.py holds every
command to the engine's recorded or installed interface. Run from the repository root:

    .venv/bin/python measurements/export_table.py [--output docs/exports.md] [--check]

``--check`` writes nothing and exits 1 when the page differs from what would be written.
"""

from __future__ import annotations

import argparse
import functools
import sys
import warnings
from pathlib import Path

from specplan.core.files import write_text_atomic
from specplan.core.profile import Profile, load_profile
from specplan.planner.export import describe
from specplan.planner.export.engines import ENGINES
from specplan.planner.export.pasted import PastedExport, not_exportable, pasted_export
from specplan.planner.options import runtime_options
from specplan.planner.solve import PlanResult, solve_plan

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = runtime_options(64, 8, 0.0)  # what `specplan export` solves with by default (greedy)
HEADER = """# Exported commands for the stored profiles

Written by `.venv/bin/python measurements/export_table.py` (do not edit by hand; `--check` says
whether this page is current). For every `profiles/*/profile.yaml` and every engine: the command
`specplan export` prints (re-solved with its defaults: budget 64, depth 8, temperature 0) and the
predicted loss it states against specplan's unrestricted plan (docs/planner-math.md section 10).
Predictions use each profile's own latencies (specplan's runtime on the 2-core CPU, or
llama.cpp's for `cpu-llamacpp`), not measurements of the engines. Models are named without
looking at this machine's files: Hugging Face repositories for vLLM, SGLang, transformers and
TensorRT-LLM, GGUF file names for llama.cpp (`specplan export` prints the path it finds, and writes
the drafter files the command loads). TensorRT-LLM's is the YAML file `trtllm-serve
--extra_llm_api_options` reads, its first line the command. Drafter folders (`out/...`) are relative to where the profile
was made. `tests/planner/export/test_stored.py` checks every command against the engine's recorded or
installed interface (docs/guide.md, "Planning for other devices and serving engines").
"""


def stored_profiles(root: Path = ROOT) -> list[Path]:
    """Every stored profile, in folder order."""
    return sorted(root.glob("profiles/*/profile.yaml"))


@functools.lru_cache(maxsize=None)
def _solved(path: Path) -> tuple[Profile, PlanResult]:
    """The stored profile and its unrestricted solve, once per profile for every engine."""
    profile = load_profile(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return profile, solve_plan(profile, OPTIONS)


def export_stored(path: Path, engine: str) -> PastedExport:
    """The pasted export of the profile at ``path`` for ``engine`` (warnings about unmeasured pairs hidden)."""
    profile, unrestricted = _solved(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pasted_export(profile, engine, OPTIONS, unrestricted=unrestricted)


def summary_row(folder: str, pasted: PastedExport) -> str:
    """One line of the summary table."""
    engine = pasted.result.restricted.plan
    return (f"| {folder} | {pasted.result.engine} | {engine.summary()} | {engine.predicted.ms_per_token:.2f} | "
            f"{engine.predicted.speedup:.2f}x | {pasted.result.loss:+.1%} |")


def engine_section(pasted: PastedExport) -> list[str]:
    """The command in a code block and the export's story as bullets."""
    language = {"transformers": "python", "tensorrt-llm": "yaml"}.get(pasted.result.engine, "bash")
    lines = [f"### {pasted.result.engine}", "", f"```{language}", pasted.config, "```", ""]
    story = describe(pasted.result) + (pasted.schedule.lines() if pasted.schedule is not None else [])
    lines += [f"- {line.strip()}" for line in story]
    return lines + [""]


def render(paths: list[Path], root: Path = ROOT) -> str:
    """The whole page for ``paths``."""
    summary = ["| profile | engine | engine plan | predicted ms/token | predicted speedup | stated loss |",
               "|---|---|---|---|---|---|"]
    sections: list[str] = []
    for path in paths:
        folder = path.parent.name
        sections += [f"## {path.relative_to(root).as_posix()}", ""]
        reason = not_exportable(load_profile(path))
        if reason:
            summary.append(f"| {folder} | all | skipped | | | |")
            sections += [f"Skipped: {reason}.", ""]
            continue
        for engine in ENGINES:
            pasted = export_stored(path, engine)
            summary.append(summary_row(folder, pasted))
            sections += engine_section(pasted)
    return "\n".join([HEADER, *summary, "", *sections]).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(ROOT / "docs" / "exports.md"), help="the page to write")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page is not current")
    args = parser.parse_args(argv)
    text = render(stored_profiles())
    output = Path(args.output)
    if args.check:
        current = output.read_text() if output.is_file() else ""
        print(f"{output}: {'current' if current == text else 'out of date: run measurements/export_table.py'}")
        return 0 if current == text else 1
    write_text_atomic(output, text)
    print(f"wrote {output} ({len(stored_profiles())} profiles x {len(ENGINES)} engines)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
