"""``specplan compile MODEL``: build (or check) the model's ahead-of-time package, so that
``--runtime compiled`` loads it instead of compiling (docs/guide.md, "Compiled steps ahead of time")."""

from __future__ import annotations

import json
import shutil

from specplan.cli.options import resolve_dtype

DTYPE_CHOICES = ("float32", "bfloat16", "float16", "auto")


def add_parser(commands) -> None:
    parser = commands.add_parser("compile", help="build a model's ahead-of-time compiled steps (runtime compiled)")
    parser.add_argument("model", help="MODEL: default, a registered name, a .gguf file or a model directory")
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default="float32", help="dtype the steps compute in (auto: bfloat16)")
    parser.add_argument("--rebuild", action="store_true", help="build again even when a valid package exists")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler="compile")


def command(args) -> int:
    import time

    import torch

    from specplan.models.load import load_model, quiet_transformers
    from specplan.runtime.compile import aot_store
    from specplan.runtime.compile.model_steps import ahead_of_time_step

    quiet_transformers()
    device = torch.device("cpu")
    loaded = load_model(args.model, resolve_dtype(args.dtype))
    key = aot_store.package_key(loaded.model, device)
    folder = aot_store.package_folder(key)
    if args.rebuild and folder.exists():
        shutil.rmtree(folder)
    stale = aot_store.stale_reason(folder, key, loaded.model)
    begin = time.perf_counter()
    step = ahead_of_time_step(loaded.model, device)
    seconds = time.perf_counter() - begin
    if step is None:
        return 1  # ahead_of_time_step said why on stderr
    result = {"model": args.model, "dtype": key.dtype, "package": str(folder), "built": stale is not None,
              "seconds": round(seconds, 1), "load_seconds": round(step.load_seconds, 2)}
    if args.json:
        print(json.dumps(result))
    else:
        done = f"built in {seconds:.0f} s" if stale is not None else "already built"
        print(f"{args.model} ({key.dtype}): {done}; loads in {step.load_seconds:.2f} s from {folder}")
    return 0
