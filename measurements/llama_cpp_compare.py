"""Plain greedy decoding, side by side in one run: llama.cpp on the GGUF file itself, and
specplan's runtime (eager, and torch.compile'd steps) and transformers' ``generate`` on the
same weights dequantised, over the same chat-templated Spec-Bench evaluation prompts.

llama.cpp computes in the GGUF's own 4-bit format (Q4_1 for the default model: ~98 MB of
weights read per token), the others in bfloat16 (269 MB), so this compares engines as a
user meets them, not arithmetic: outputs are not expected to be identical. Methods run
interleaved prompt by prompt (the order rotates), after a warm-up (and, for the compiled
runtime, after its graphs are compiled; compile time is printed apart).

llama-cpp-python is not a dependency of specplan (it builds llama.cpp from source); install
it into the venv to run this: ``.venv/bin/pip install llama-cpp-python`` (a few minutes).

    .venv/bin/python measurements/llama_cpp_compare.py [--limit 13] [--max-new-tokens 64]
        [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from specplan.core.prompts import spec_bench_split, stratified
from specplan.models.chat import encode_prompt
from specplan.core.runtime_modes import RuntimeMode
from specplan.runtime.compile.warmup import compile_buckets
from specplan.models.load import default_gguf_path, load_model, quiet_transformers
from specplan.runtime.session import ModelSession


def runtime_decode(model, options: dict):
    """Greedy decoding with one ModelSession (``options``: cache / compiled); returns a runner."""
    def run(prompt_ids: list[int], max_new_tokens: int, stop: set[int]) -> tuple[list[int], float, float]:
        session = ModelSession(model, torch.device("cpu"), **options)
        start = time.perf_counter()
        token = int(session.extend(prompt_ids)[-1].argmax())
        first = time.perf_counter()
        tokens = [token]
        while len(tokens) < max_new_tokens and token not in stop:
            token = int(session.extend([token])[-1].argmax())
            tokens.append(token)
        return tokens, first - start, time.perf_counter() - first
    return run


def transformers_decode(model):
    def run(prompt_ids: list[int], max_new_tokens: int, stop: set[int]) -> tuple[list[int], float, float]:
        ids = torch.tensor([prompt_ids])
        start = time.perf_counter()
        with torch.inference_mode():
            output = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=sorted(stop) or None)
        elapsed = time.perf_counter() - start
        return output[0, len(prompt_ids):].tolist(), float("nan"), elapsed
    return run


def llama_cpp_decode(path: Path, threads: int):
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None:
        raise SystemExit("llama-cpp-python is not installed; run `.venv/bin/pip install llama-cpp-python` "
                         "(it builds llama.cpp from source, a few minutes)")
    from specplan.runtime.llama_cpp_session import high_level_llama  # repacking off on an AMX CPU

    llm = high_level_llama(model_path=str(path), n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False)

    def run(prompt_ids: list[int], max_new_tokens: int, stop: set[int]) -> tuple[list[int], float, float]:
        tokens: list[int] = []
        llm.reset()  # generate() keeps a cached prefix of the last prompt: every run prefills in full
        start = time.perf_counter()
        first = None
        for token in llm.generate(prompt_ids, top_k=1, temp=0.0, reset=True):
            if first is None:
                first = time.perf_counter()
            tokens.append(int(token))
            if len(tokens) >= max_new_tokens or token in stop:
                break
        return tokens, first - start, time.perf_counter() - first
    return run


def summarise(rows: dict[str, list[tuple[int, float, float]]]) -> list[dict]:
    """tok/s overall (prefill included) and per decoded token (after the first), per method."""
    table = []
    for name, samples in rows.items():
        tokens = sum(count for count, _, _ in samples)
        prefill = sum(first for _, first, _ in samples)
        rest = sum(decode for _, _, decode in samples)
        decoded = sum(count - 1 for count, _, _ in samples)
        total = (prefill if prefill == prefill else 0.0) + rest
        table.append({"method": name, "tokens": tokens, "tok_s": tokens / total,
                      "decode_tok_s": decoded / rest if prefill == prefill else float("nan"),
                      "median_prompt_tok_s": statistics.median(c / ((f if f == f else 0.0) + d) for c, f, d in samples)})
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=13)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-compiled", action="store_true", help="leave out the compiled runtime (it compiles for minutes)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    quiet_transformers()
    torch.set_num_threads(args.threads)
    target = load_model("default", "bfloat16")
    stop = {int(target.tokenizer.eos_token_id)}
    methods = {"llama.cpp (Q4_1)": llama_cpp_decode(default_gguf_path(), args.threads),
               "specplan eager (bf16)": runtime_decode(target.model, {"cache": "dynamic", "compiled": False}),
               "transformers generate (bf16)": transformers_decode(target.model)}
    prompts = [encode_prompt(target.tokenizer, p.text) for p in stratified(spec_bench_split("evaluation"), args.limit)]
    if not args.no_compiled:
        methods["specplan compiled (bf16)"] = runtime_decode(target.model, {"cache": "static", "compiled": True})
        seconds = compile_buckets(target.model, torch.device("cpu"), prompts[0], RuntimeMode("compiled"))
        print(f"compiled runtime: {seconds:.0f} s compiling (not timed below)")
    for run in methods.values():  # warm-up
        run(prompts[0], 8, stop)
    rows: dict[str, list] = {name: [] for name in methods}
    names = list(methods)
    for index, prompt_ids in enumerate(prompts):
        for name in names[index % len(names):] + names[: index % len(names)]:
            tokens, first, decode = methods[name](prompt_ids, args.max_new_tokens, stop)
            rows[name].append((len(tokens), first, decode))
        print(f"prompt {index + 1}/{len(prompts)} done", flush=True)
    table = summarise(rows)
    print(f"\nplain greedy decoding, {len(prompts)} Spec-Bench evaluation prompts x up to {args.max_new_tokens} tokens, "
          f"{args.threads} threads, one interleaved run\n")
    print("| method | tokens | tok/s (prefill included) | decode tok/s (after the first token) | median per-prompt tok/s |")
    print("|---|---|---|---|---|")
    for row in table:
        print(f"| {row['method']} | {row['tokens']} | {row['tok_s']:.1f} | {row['decode_tok_s']:.1f} | {row['median_prompt_tok_s']:.1f} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"threads": args.threads, "prompts": len(prompts),
                                               "max_new_tokens": args.max_new_tokens, "rows": table}, indent=2))


if __name__ == "__main__":
    main()
