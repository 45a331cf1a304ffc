"""``specplan bench PLAN --engine llama.cpp|transformers``: the exported setting against the engine's
plain decoding on the same prompts, measured beside the export's prediction
(:mod:`specplan.bench.engine_llama_cpp`, :mod:`specplan.bench.engine_transformers`; one report
for both, :mod:`specplan.bench.engine_report`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from specplan.cli.bench import bench_prompts
from specplan.cli.export import model_names, profile_source
from specplan.cli.export_drafters import planned_gguf, write_llama_cpp_drafter
from specplan.core.contract import load_plan_and_profile
from specplan.core.errors import SpecplanError
from specplan.core.prompts import stratified
from specplan.core.yamlio import file_sha256
from specplan.planner.export import export_plan
from specplan.planner.options import runtime_options

ENGINES = ("llama.cpp", "transformers")
AGREEMENT = {
    "llama.cpp": "llama.cpp's batched and one-token kernels may round apart; reported, not required",
    "transformers": "greedy verification gives plain greedy's output: equal in float32, a near-tie may part in bfloat16",
}


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


def _prompts(args) -> list:
    return stratified(bench_prompts(args)[0], args.limit)


def _export(profile, profile_path, engine: str, names):
    """The export's re-solve for ``engine`` (greedy, the export's default limits): the setting and its prediction."""
    return export_plan(profile, engine, runtime_options(64, None, 0.0), profile_path=str(profile_path),
                       profile_sha256=file_sha256(profile_path), names=names)


def _llama_cpp(args):
    """The exported llama.cpp setting and plain llama.cpp in llama-cpp-python."""
    from specplan.bench.engine_llama_cpp import methods
    from specplan.bench.engine_report import EngineBench
    from specplan.bench.engine_rows import run_engine_bench
    from specplan.bench.llamacpp_peer import require_llama_cpp
    from specplan.cli.profile_engine import target_gguf

    require_llama_cpp()
    _, profile, profile_path = load_plan_and_profile(args.plan)
    target = target_gguf(profile, "bench a plan of")
    planned = planned_gguf(profile, Path(args.plan).parent / "export-llama.cpp")
    names = model_names(profile, "llama.cpp", planned)
    result = _export(profile, profile_path, "llama.cpp", names)
    source = profile_source(profile, result.stage.drafter) if result.stage is not None else ""
    write_llama_cpp_drafter(result.stage, source, names, planned)
    prompt_ids, eos = _prompt_ids(profile, _prompts(args))
    context = max(len(ids) for ids in prompt_ids) + args.max_new_tokens + 16
    threads = args.threads or os.cpu_count() or 1
    runs = methods(str(target), result.stage, source, names, eos, context, threads)
    rows = run_engine_bench(runs, prompt_ids, args.max_new_tokens)
    return EngineBench("llama.cpp", result.config, result.restricted.plan.predicted, tuple(rows), len(prompt_ids),
                       args.max_new_tokens, profile.device.source, {"threads": threads}, AGREEMENT["llama.cpp"])


def _transformers(args):
    """The exported transformers setting and plain greedy ``generate`` on the target as the profile loads it."""
    import torch

    from specplan.bench.engine_report import EngineBench
    from specplan.bench.engine_rows import run_engine_bench
    from specplan.bench.engine_transformers import WARM_UP_TOKENS, lossless_line, transformers_methods
    from specplan.models.chat import encode_prompt
    from specplan.models.load import quiet_transformers
    from specplan.quant.load import load_model_variant
    from specplan.runtime.build import eos_ids
    from specplan.runtime.context import check_fits, model_context

    _, profile, profile_path = load_plan_and_profile(args.plan)
    result = _export(profile, profile_path, "transformers", model_names(profile, "transformers"))
    source = profile_source(profile, result.stage.drafter) if result.stage is not None else ""
    prompts = _prompts(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    quiet_transformers()
    device = torch.device("cuda" if profile.device.kind == "cuda" and torch.cuda.is_available() else "cpu")
    target = load_model_variant(profile.target.source, profile.target.dtype, str(device), quant=profile.target.quant)
    prompt_ids = [encode_prompt(target.tokenizer, prompt.text) for prompt in prompts]
    width = result.stage.shape.gamma + 1 if result.stage is not None else 0
    for prompt, ids in zip(prompts, prompt_ids):  # every prompt fits before the long run starts
        check_fits(len(ids), args.max_new_tokens, width, model_context(target.model.config), f"prompt {prompt.prompt_id}")
    runs = transformers_methods(result.stage, source, target, device, eos_ids(target))
    rows = run_engine_bench(runs, prompt_ids, args.max_new_tokens, warm_up_tokens=WARM_UP_TOKENS)
    _, verdict = lossless_line(rows, prompt_ids, target)
    settings = {"threads": torch.get_num_threads(), "dtype": target.dtype, "device": str(device)}
    return EngineBench("transformers", result.config, result.restricted.plan.predicted, tuple(rows), len(prompt_ids),
                       args.max_new_tokens, profile.device.source, settings, AGREEMENT["transformers"], verdict)


def bench_engine(args) -> int:
    """Run the exported setting and the engine's plain decoding; print predicted beside measured."""
    if args.engine not in ENGINES:
        raise SpecplanError(f"--engine {args.engine!r}: specplan benches {' and '.join(ENGINES)} (the engines "
                            "installed here); pass --engine llama.cpp or --engine transformers")
    from specplan.bench.engine_report import engine_record, engine_table

    bench = (_llama_cpp if args.engine == "llama.cpp" else _transformers)(args)
    if args.json:
        print(json.dumps(engine_record(bench)))
    else:
        print("\n".join(engine_table(bench)))
    return 0
