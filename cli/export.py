"""``specplan export PLAN --engine E``: a serving engine's configuration, re-solved for what it expresses."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from specplan.core.contract import load_plan_and_profile
from specplan.core.errors import BackendMissingError, ModelError
from specplan.core.yamlio import file_sha256
from specplan.cli.export_drafters import planned_gguf, planned_heads, write_head_checkpoint, write_llama_cpp_drafter
from specplan.planner.export import describe, engine_support
from specplan.planner.export.models import HEAD_CHECKPOINT_ENGINES, ModelNames
from specplan.planner.export.pasted import pasted_export
from specplan.planner.options import runtime_options
from specplan.cli.options import integer
from specplan.core.limits import MAX_DEPTH, MAX_TREE_BUDGET


def add_parser(commands) -> None:
    parser = commands.add_parser("export", help="print a serving engine's config for a plan, re-solved for the engine")
    parser.add_argument("plan", help="plan.yaml written by `specplan plan` (with or without --sku)")
    parser.add_argument("--engine", required=True, help="vllm | sglang | transformers | llama.cpp | tensorrt-llm")
    parser.add_argument("--max-budget", type=integer(1, MAX_TREE_BUDGET), default=64, help="largest tree budget (nodes) to consider")
    parser.add_argument("--max-depth", type=integer(1, MAX_DEPTH), default=None,
                        help="largest draft depth / gamma to consider (default: as `specplan plan`)")
    parser.add_argument("--json", action="store_true", help="one JSON object with the config, both plans and the loss")
    parser.add_argument("-o", "--output", default=None,
                        help="folder for the drafter files the engine loads (llama.cpp: the draft model as GGUF; "
                             "vllm, sglang, tensorrt-llm: an EAGLE-3 head as its checkpoint); "
                             "default: export-ENGINE next to the plan")
    parser.set_defaults(handler="export")



def model_names(profile, engine: str, planned: tuple[tuple[str, str], ...] = (),
                heads: tuple[tuple[str, str], ...] = ()) -> ModelNames:
    """How the command names the profile's models; for llama.cpp, the GGUF files found on this machine
    and those ``planned`` to be written from model folders."""
    found = list(planned)
    if engine == "llama.cpp":
        from specplan.models.load import gguf_file  # imports torch: only for llama.cpp's file paths

        for model in profile.models:
            source = model.source.partition(":")[2] if model.source.startswith("model:") else model.source
            try:
                path = gguf_file(source)
            except ModelError:  # not fetched here: the command keeps the file name
                path = None
            if path is not None:
                found.append((source, str(path)))
    return ModelNames(profile.target.source, profile.device.kind, tuple(found), heads=heads)


def _repacking_crashes() -> bool:
    """Whether llama.cpp's weight repacking crashes on this machine (a CPU with AMX): its llama-server then runs
    only with ``--no-repack``. False where llama-cpp-python is not installed (the command is written for
    another machine)."""
    from specplan.runtime.llama_cpp_session import repacking_crashes

    try:
        return repacking_crashes()
    except BackendMissingError:
        return False


def profile_source(profile, drafter: str) -> str:
    """The SPEC source of ``drafter`` in ``profile`` (a model or a retrieval drafter)."""
    model = profile.model(drafter)
    return model.source if model is not None else profile.retrieval_entry(drafter).source


def _draft_tokens(stage) -> int:
    if stage is None:
        return 0
    return stage.shape.gamma if stage.shape.kind == "sequence" else (len(stage.shape.parents) or stage.shape.budget) - 1


def _schedule_record(schedule) -> dict:
    return {"per_batch": schedule.per_batch, "ranges": [list(entry) for entry in schedule.ranges],
            "rows": [{"batch": row.batch, "draft_tokens": _draft_tokens(row.stage),
                      "engine_ms_per_token": row.engine_ms, "best_engine_ms_per_token": row.best_engine_ms,
                      "unrestricted_ms_per_token": row.unrestricted_ms, "loss": row.loss,
                      "one_setting_loss": row.fixed_loss} for row in schedule.rows]}


def command(args) -> int:
    """``specplan export PLAN --engine E``: the engine's own config on stdout (a command; transformers: a
    Python snippet; TensorRT-LLM: its YAML file), the story on stderr."""
    engine_support(args.engine)  # an unknown engine fails before any file is read
    plan, profile, profile_path = load_plan_and_profile(args.plan)
    options = runtime_options(args.max_budget, args.max_depth, plan.temperature)
    output = Path(args.output) if args.output else Path(args.plan).parent / f"export-{args.engine}"
    planned = planned_gguf(profile, output) if args.engine == "llama.cpp" else ()
    heads = planned_heads(profile, output) if args.engine in HEAD_CHECKPOINT_ENGINES else ()
    names = model_names(profile, args.engine, planned, heads)
    pasted = pasted_export(profile, args.engine, options, profile_path=str(profile_path),
                           profile_sha256=file_sha256(profile_path), names=names)
    result, schedule, config = pasted.result, pasted.schedule, pasted.config
    no_repack = args.engine == "llama.cpp" and _repacking_crashes()
    if no_repack:
        config += " --no-repack"
    written = []
    if args.engine == "llama.cpp" and result.stage is not None:
        written = write_llama_cpp_drafter(result.stage, profile_source(profile, result.stage.drafter), names, planned)
    if heads and result.stage is not None:
        written = write_head_checkpoint(result.stage, profile_source(profile, result.stage.drafter), heads)
    lines = describe(result) + [f"wrote {path} (the drafter in {result.engine}'s format)" for path in written]
    if no_repack:
        lines.append("--no-repack: llama.cpp's weight repacking crashes on this CPU's AMX (docs/backends.md, \"AMX\")")
    if schedule is not None:  # T(n, b): the setting per batch size, or the loss of one setting
        lines += schedule.lines()
    if plan.device.get("source") == "roofline":
        lines.insert(0, f"latencies modelled for {plan.device.get('sku')} (roofline), acceptance measured")
    if args.json:
        print(json.dumps({
            "engine": result.engine, "config": config, "plan": str(args.plan),
            "engine_plan": result.restricted.plan.summary(),
            "engine_ms_per_token": result.restricted.plan.predicted.ms_per_token,
            "engine_speedup": result.restricted.plan.predicted.speedup,
            "unrestricted_plan": result.unrestricted.plan.summary(),
            "unrestricted_ms_per_token": result.unrestricted.plan.predicted.ms_per_token,
            "loss": result.loss, "left_out": list(result.excluded), "not_writable_yet": list(result.unwritable),
            "engine_limits": list(result.limits), "notes": list(result.notes), "written": written,
            **({"schedule": _schedule_record(schedule)} if schedule is not None else {}),
        }))
    else:
        print(config)
    for line in lines:
        sys.stderr.write(f"specplan: {line}\n")
    return 0

