"""Which llama.cpp numerics make plain decoding as fast as llama.cpp's own: the default's evidence.

Greedy decoding of the same prompts three ways, interleaved prompt by prompt, at each thread count:

- **llama.cpp**: llama-cpp-python's ``Llama`` with its defaults (weights repacked, flash attention as
  llama.cpp chooses), ``n_threads`` = ``n_threads_batch`` = the thread count, one ``eval`` per token
  and numpy's argmax of its logits row: llama.cpp's own plain decoding, the planner's floor;
- **exact**: specplan's plain engine on a ``LlamaCppSession(exact=True)`` (one-token decodes on one
  thread, no repacking, flash attention on: verifies bit-identical to one-token decodes);
- **fast**: the same on ``exact=False`` (llama.cpp's own settings).

Decode tok/s leaves the prompt's prefill and the first token out (from the first token to the last),
as llama-server's own rate does. Prompts: ``PROMPTS`` below, written for this script (code, math,
chat), not from any workload the project calibrates on.

    .venv/bin/python measurements/numerics_floor.py [--model default|qwen2.5-coder-1.5b|FILE.gguf]
        [--threads 1,2] [--tokens 64] [--repeats 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from specplan.models.load import gguf_file, load_gguf_model
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.llama_cpp_session import LlamaCppSession, high_level_llama

PROMPTS = (
    "Write a Python function that merges two sorted lists without using sort().",
    "A train leaves at 3:40 pm and travels 210 km at 84 km/h. When does it arrive? Explain.",
    "Give me three ideas for a birthday party for a seven-year-old who loves dinosaurs.",
    "Explain the difference between a mutex and a semaphore to a new programmer.",
    "Write a SQL query that returns the five customers with the most orders in 2023.",
    "What is 17 * 23? Show the steps.",
    "Write a short, friendly email asking a colleague to review my pull request.",
    "Implement binary search in JavaScript and explain its complexity.",
)


def chat(tokenizer, text: str) -> list[int]:
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True)
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]


def llama_cpp_loop(llm, prompt: list[int], tokens: int) -> float:
    """llama.cpp's own greedy loop; decode seconds from the first token to the last."""
    llm.reset()
    llm.eval(prompt)
    token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    start = time.perf_counter()
    for _ in range(tokens - 1):
        llm.eval([token])
        token = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    return time.perf_counter() - start


def engine_loop(engine: SpeculativeEngine, prompt: list[int], tokens: int) -> float:
    """specplan's plain engine; decode seconds from the first committed token to the last."""
    stamps = []
    engine.generate(prompt, tokens, SamplingConfig(), on_commit=lambda chunk: stamps.append(time.perf_counter()))
    return stamps[-1] - stamps[0]


def measure(model: str, threads: int, tokens: int, repeats: int) -> dict[str, float]:
    loaded = load_gguf_model(model, threads)
    path = str(gguf_file(model))
    prompts = [chat(loaded.tokenizer, text) for text in PROMPTS]
    llm = high_level_llama(model_path=path, n_ctx=2048, n_threads=threads, n_threads_batch=threads, verbose=False)
    sessions = {name: LlamaCppSession(path, n_ctx=2048, threads=threads, exact=name == "exact") for name in ("exact", "fast")}
    engines = {name: SpeculativeEngine(session, torch.device("cpu"), eos_ids=set()) for name, session in sessions.items()}
    seconds = {"llama.cpp": [], "exact": [], "fast": []}
    for _ in range(repeats):
        for prompt in prompts:
            seconds["llama.cpp"].append(llama_cpp_loop(llm, prompt, tokens))
            for name, engine in engines.items():
                seconds[name].append(engine_loop(engine, prompt, tokens))
    llm.close()
    for session in sessions.values():
        session.close()
    return {name: len(values) * (tokens - 1) / sum(values) for name, values in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(f"model {args.model}, {len(PROMPTS)} prompts x {args.tokens} tokens x {args.repeats}, decode tok/s")
    print("| threads | llama.cpp's own | ours, exact | ours, fast | exact / llama.cpp | fast / llama.cpp |")
    print("|---:|---:|---:|---:|---:|---:|")
    for threads in (int(t) for t in args.threads.split(",")):
        rates = measure(args.model, threads, args.tokens, args.repeats)
        own = rates["llama.cpp"]
        print(f"| {threads} | {own:.1f} | {rates['exact']:.1f} | {rates['fast']:.1f} | "
              f"{rates['exact'] / own:.3f} | {rates['fast'] / own:.3f} |", flush=True)


if __name__ == "__main__":
    main()
