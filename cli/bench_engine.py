"""``specplan bench PLAN --engine llama.cpp``: the exported llama.cpp setting against llama.cpp's
plain decoding on the same prompts, measured beside the export's prediction
(:mod:`specplan.bench.engine_llama_cpp`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from specplan.cli.export import model_names, profile_source
from specplan.cli.export_drafters import planned_gguf, write_llama_cpp_drafter
from specplan.core.contract import load_plan_and_profile
from specplan.core.errors import SpecplanError
from specplan.core.prompts import read_prompts, stratified
from specplan.core.workloads import workload_split
from specplan.core.yamlio import file_sha256
from specplan.planner.export import export_plan
from specplan.planner.options import runtime_options


def _prompt_ids(profile, prompts) -> tuple[list[list[int]], set[int]]:
    """The prompts as the target's chat-formatted token ids, and its EOS ids (tokenizer and generation config)."""
    from transformers import AutoTokenizer, GenerationConfig

    from specplan.models.chat import encode_prompt
    from specplan.models.load import resolve_model_dir

    folder = resolve_model_dir(profile.target.source)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    eos = {int(tokenizer.eos_token_id)} if tokenizer.eos_token_id is not None else set()
    try:
        configured = GenerationConfig.from_pretrained(folder).eos_token_id
    except OSError:
        configured = None
    eos |= {configured} if isinstance(configured, int) else set(configured or ())
    return [encode_prompt(tokenizer, prompt.text) for prompt in prompts], eos


def bench_engine(args) -> int:
    """Run the exported llama.cpp setting and plain llama.cpp; print predicted beside measured."""
    if args.threads is not None and args.threads < 1:
        raise SpecplanError("--threads must be at least 1")
    if args.engine != "llama.cpp":
        raise SpecplanError(f"--engine {args.engine!r}: specplan benches llama.cpp only (through llama-cpp-python); "
                            "pass --engine llama.cpp")
    from specplan.bench.engine_llama_cpp import agreement, methods, run_engine_bench
    from specplan.bench.llamacpp_peer import require_llama_cpp
    from specplan.cli.profile_engine import target_gguf

    require_llama_cpp()
    plan, profile, profile_path = load_plan_and_profile(args.plan)
    target = target_gguf(profile, "bench a plan of")
    planned = planned_gguf(profile, Path(args.plan).parent / "export-llama.cpp")
    names = model_names(profile, "llama.cpp", planned)
    result = export_plan(profile, "llama.cpp", runtime_options(64, 8, 0.0), profile_path=str(profile_path),
                         profile_sha256=file_sha256(profile_path), names=names)
    source = profile_source(profile, result.stage.drafter) if result.stage is not None else ""
    write_llama_cpp_drafter(result.stage, source, names, planned)
    prompts = stratified(read_prompts(args.prompts) if args.prompts else workload_split(args.workload, "evaluation"),
                         args.limit)
    prompt_ids, eos = _prompt_ids(profile, prompts)
    context = max(len(ids) for ids in prompt_ids) + args.max_new_tokens + 16
    threads = args.threads or os.cpu_count() or 1
    runs = methods(str(target), result.stage, source, names, eos, context, threads)
    rows = run_engine_bench(runs, prompt_ids, args.max_new_tokens)
    plain, exported = rows[0], rows[-1]
    predicted = result.restricted.plan.predicted
    measured_speedup = plain.decode_ms_per_token / exported.decode_ms_per_token
    record = {"engine": "llama.cpp", "config": result.config, "prompts": len(prompt_ids),
              "max_new_tokens": args.max_new_tokens, "threads": threads, "predicted_ms_per_token": predicted.ms_per_token,
              "predicted_speedup": predicted.speedup, "measured_ms_per_token": exported.decode_ms_per_token,
              "measured_plain_ms_per_token": plain.decode_ms_per_token, "measured_speedup": measured_speedup,
              "same_output_share": agreement(rows), "latency_source": profile.device.source,
              "methods": [{"name": row.name, "description": row.description, "decode_ms_per_token":
                           row.decode_ms_per_token, "new_tokens": row.new_tokens} for row in rows]}
    if args.json:
        print(json.dumps(record))
        return 0
    print(f"llama.cpp bench of `{result.config}` on {len(prompt_ids)} prompts x {args.max_new_tokens} new tokens "
          f"(decode ms per token after the first, {threads} threads; latency in the prediction: {profile.device.source})")
    print("| method | predicted ms/token | measured ms/token | predicted speedup | measured speedup |")
    print("|---|---|---|---|---|")
    print(f"| llama.cpp plain | {predicted.ms_per_token * predicted.speedup:.2f} | {plain.decode_ms_per_token:.2f} | "
          f"1.00x | 1.00x |")
    if len(rows) > 1:
        print(f"| {exported.description} | {predicted.ms_per_token:.2f} | {exported.decode_ms_per_token:.2f} | "
              f"{predicted.speedup:.2f}x | {measured_speedup:.2f}x |")
    else:
        print("the export chose plain decoding (no speculative option): nothing else to run")
    print(f"outputs equal to plain llama.cpp on {agreement(rows):.0%} of prompts (llama.cpp's batched and "
          "one-token kernels may round apart; reported, not required)")
    return 0
