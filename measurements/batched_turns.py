"""Two requests decoded together against the same two one after another, in one process: whether batching
two requests' rounds into one ``llama_decode`` (``specplan serve --parallel 2``, runtime/llama_cpp_shared.py)
serves more tokens a second than taking turns on one slot.

The plan is opened as ``serve --parallel 2`` opens it (two slot engines over one shared context). For each
pair of evaluation prompts (in a rotating order): ``together``, each prompt in a thread of its own inside
the batcher's ``request``, the main thread stepping the batcher; ``turns``, the two prompts one after
another on the first slot's engine; ``alone``, the two one after another on the engine ``serve --parallel 1``
runs (a context of its own, one sequence). Prints per pair the tokens, wall seconds (prefill included), the
batcher's steps and the joint ones (two requests' extends in one decode) with their widths and ms; last,
each mode's pooled tokens a second.

    [THREADS=2] .venv/bin/python measurements/batched_turns.py PLAN WORKLOAD PAIRS

Run it on a quiet machine (nothing else timed or tested beside it).
"""

from __future__ import annotations

import os
import sys
import threading
import time

from specplan.api import Runner
from specplan.core.prompts import stratified
from specplan.core.quiet import quiet_libraries
from specplan.core.workloads import workload_split
from specplan.models.chat import encode_messages
from specplan.runtime import llama_cpp_shared
from specplan.runtime.drafters.base import SamplingConfig

TOKENS = 128


def logged_steps(steps: list) -> None:
    """Record each shared decode's extends' widths and seconds in ``steps``."""
    decode = llama_cpp_shared.SharedContext.decode_together

    def timed(self, submissions):
        started = time.perf_counter()
        decode(self, submissions)
        steps.append((tuple(len(submission.tokens) for submission in submissions), time.perf_counter() - started))

    llama_cpp_shared.SharedContext.decode_together = timed


def together(engines, batcher, pair, sampling):
    results = [None, None]

    def work(index, ids):
        with batcher.request():
            results[index] = engines[index].generate(ids, TOKENS, sampling)

    threads = [threading.Thread(target=work, args=(index, ids)) for index, ids in enumerate(pair)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        batcher.step(0.01)
    return results


def main() -> None:
    quiet_libraries(verbose=False)
    plan, workload, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    runner = Runner.open(plan, threads=int(os.environ.get("THREADS", "2")), parallel=2).plan_runner
    engines, batcher = runner.slot_engines(2), runner.target.sessions.batcher
    alone = Runner.open(plan, threads=int(os.environ.get("THREADS", "2"))).plan_runner.engine
    tokenizer = runner.target.tokenizer
    prompts = [encode_messages(tokenizer, [{"role": "user", "content": prompt.text}])
               for prompt in stratified(workload_split(workload, "evaluation"), 2 * pairs)]
    steps: list = []
    logged_steps(steps)
    sampling = SamplingConfig()
    for engine in engines + [alone]:  # warm-up
        engine.generate(prompts[0][:40], 4, sampling)
    totals = {"together": [0, 0.0], "turns": [0, 0.0], "alone": [0, 0.0]}
    modes = tuple(totals)
    for index in range(pairs):
        pair = (prompts[2 * index], prompts[2 * index + 1])
        for mode in modes[index % 3:] + modes[:index % 3]:
            steps.clear()
            started = time.perf_counter()
            if mode == "together":
                results = together(engines, batcher, pair, sampling)
            else:
                engine = engines[0] if mode == "turns" else alone
                results = [engine.generate(ids, TOKENS, sampling) for ids in pair]
            wall = time.perf_counter() - started
            tokens = sum(len(result.token_ids) for result in results)
            totals[mode][0] += tokens
            totals[mode][1] += wall
            joint = [(sum(widths), round(seconds * 1e3)) for widths, seconds in steps if len(widths) > 1]
            print(index, mode, tokens, f"{wall:.2f} s", f"{tokens / wall:.1f} tok/s", "steps", len(steps),
                  "joint", len(joint), "first joint (width, ms)", joint[:3], flush=True)
    for mode, (tokens, wall) in totals.items():
        print(f"{mode}: {tokens / wall:.2f} tok/s ({tokens} tokens, {wall:.1f} s)")


if __name__ == "__main__":
    main()
