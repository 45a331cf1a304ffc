"""``specplan profile --engine llama.cpp --acceptance-from PROFILE``: llama.cpp's own T(n).

Acceptance depends on the models and the text, not on the engine, so it is kept from the
measured PROFILE; the latency curves of the models llama.cpp runs are measured again by
llama-cpp-python on the GGUF files llama-server would load: the target's GGUF (``default``, a
registered model or a ``.gguf`` path) and each model drafter's (a ``.gguf`` file, or a
Llama / Qwen2 folder written as GGUF as ``export`` writes it). Drafters llama.cpp cannot run
(layer skipping, heads, Token Recycling, Cacheback) are left out; the n-gram drafters keep the
profile's ms per call (specplan's lookup, not llama.cpp's). ``specplan plan`` and
``export --engine llama.cpp`` on the result are solved on what llama.cpp costs.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from specplan.cli.export_drafters import file_name, model_folder
from specplan.core.errors import ModelError, SpecplanError
from specplan.core.profile import Profile, load_profile, save_profile

LLAMA_CPP_RETRIEVAL = ("ngram:",)  # llama.cpp's ngram-simple / ngram-map; no recycle or cache


def drafter_gguf(source: str, output: Path) -> Path | None:
    """The GGUF llama.cpp loads for a ``model:`` source (written from a folder); None if it has none."""
    from specplan.models.load import gguf_file

    argument = source.partition(":")[2]
    try:
        path = gguf_file(argument)
    except ModelError:
        return None
    if path is not None:
        return path
    folder = model_folder(argument)
    if folder is None:
        return None
    from specplan.models.gguf_write import write_gguf

    return write_gguf(folder, output.parent / "llama.cpp-drafters" / file_name(argument, ".gguf"))


def target_gguf(profile: Profile, verb: str) -> Path:
    """The GGUF file llama.cpp runs as ``profile``'s target; a one-line error naming ``verb`` if none."""
    from specplan.models.load import gguf_file

    try:
        target = gguf_file(profile.target.source)
    except ModelError as error:
        raise SpecplanError(str(error)) from None
    if target is None:
        raise SpecplanError(f"llama.cpp runs the target from a GGUF file and {profile.target.source!r} is not one; "
                            f"{verb} a `default`, registered or .gguf target")
    return target


def engine_files(profile: Profile, output: Path) -> tuple[dict[str, Path], list[str]]:
    """(model id -> GGUF file) for the models llama.cpp runs, and one line per model left out."""
    files, left_out = {profile.target.id: target_gguf(profile, "profile")}, []
    for model in profile.models:
        if model.id == profile.target.id or model.role == "variant":
            continue
        path = drafter_gguf(model.source, output) if model.source.startswith("model:") else None
        if path is None:
            left_out.append(f"{model.id} ({model.source}): llama.cpp cannot run it from a GGUF file")
        else:
            files[model.id] = path
    return files, left_out


def engine_profile(profile: Profile, output: Path, repeats: int, threads: int) -> tuple[Profile, list[str]]:
    """``profile`` with llama.cpp's T(n) for the models it runs; the lines to print."""
    from specplan.profiler.llama_cpp_latency import measure_curve
    from specplan.runtime.llama_cpp_session import llama_cpp_version

    version = llama_cpp_version()
    files, lines = engine_files(profile, output)
    models = []
    for model in profile.models:
        if model.id not in files:
            continue
        curves = tuple(measure_curve(files[model.id], curve.context, curve.n, repeats, threads)
                       for curve in model.latency if curve.batch == 1)
        lines.append(f"{model.id}: llama.cpp T(n) on {files[model.id]}: "
                     + ", ".join(f"T({n})={ms:.2f}" for curve in curves for n, ms in zip(curve.n, curve.ms)) + " ms")
        models.append(replace(model, latency=curves, mode="eager"))
    retrieval = tuple(entry for entry in profile.retrieval if entry.source.startswith(LLAMA_CPP_RETRIEVAL))
    lines += [f"{entry.id} ({entry.source}): llama.cpp has no such drafter" for entry in profile.retrieval
              if entry not in retrieval]
    kept = {model.id for model in models} | {entry.id for entry in retrieval}
    device = replace(profile.device, name=f"{profile.device.name}, llama.cpp (llama-cpp-python {version}, "
                                          f"{threads} threads)", source="engine:llama.cpp")
    return replace(profile, device=device, models=tuple(models), retrieval=retrieval,
                   acceptance=tuple(entry for entry in profile.acceptance
                                    if entry.drafter in kept and entry.verifier in kept)), lines


def engine_profile_command(args) -> int:
    """Measure llama.cpp's T(n) for the models of ``--acceptance-from`` and write ``-o``."""
    if args.engine != "llama.cpp":
        raise SpecplanError(f"--engine {args.engine!r}: specplan measures llama.cpp only (vLLM and SGLang are not "
                            "installed here); pass --engine llama.cpp")
    if not args.acceptance_from:
        raise SpecplanError("--engine llama.cpp keeps acceptance from a measured profile: pass --acceptance-from PROFILE")
    from specplan.cli.plan import solve_and_write
    from specplan.cli.profile import check_outputs

    if Path(args.output).resolve() == Path(args.acceptance_from).resolve():
        raise SpecplanError(f"-o {args.output} is the --acceptance-from profile; write the llama.cpp profile elsewhere")
    plan_path = check_outputs(args)
    output = Path(args.output)
    threads = args.threads or os.cpu_count() or 1
    profile, lines = engine_profile(load_profile(args.acceptance_from), output, 2 if args.quick else 5, threads)
    save_profile(profile, output)
    for line in lines:
        print(f"specplan: {line}")
    print(f"specplan: wrote {output} (llama.cpp latency, acceptance from {args.acceptance_from})")
    if plan_path is not None:
        solve_and_write(profile, output, plan_path, max_budget=64, max_depth=None, temperature=0.0, explain=False)
    return 0
