"""Time between one-token decodes: the runtime's plain loop against a bare loop, on llama.cpp.

Plain greedy decoding of one prompt, 128 tokens, two ways over the same llama.cpp session
(docs/results.md, "Our plain loop against llama-server's"):

- **bare**: fill the batch, ``llama_decode``, numpy argmax over llama.cpp's logits buffer;
- **engine**: specplan's ``SpeculativeEngine`` with no drafter (what ``plain-runtime`` runs).

Each ``llama_decode`` call is timed; the report gives, per way, the median time inside a decode and
the median gap between one decode's end and the next one's start (everything the loop does in
Python: the round, the verify, the commit). The ways alternate, ``--repeats`` times each.

A second table times a one-token decode right after another one (llama.cpp reuses its compute
graph) and right after a decode of 4 tokens (it builds the graph again), as the profile's T(n)
is measured: every width after a different one.

``--thread-pool`` adds a third way: the bare loop with a persistent ggml thread pool attached to the
context (``ggml_threadpool_new``, ``llama_attach_threadpool``, through ctypes: llama-cpp-python binds
neither), as llama-server attaches one (its common/common.cpp); without it ggml makes one per graph.

``--plan PLAN`` times a plan's engine instead (its drafter, match gate and guard: what ``specplan run``
plays) against the plain engine and the bare loop over the plan's own target session, on the plan's
model; the median gap is that of rounds that drafted nothing, the common round where nothing copies.

    .venv/bin/python measurements/decode_gaps.py [--model default|FILE.gguf | --plan PLAN] [--repeats 4] [--threads 2] [--thread-pool]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import time

import numpy as np
import torch

from specplan.models.load import default_gguf_path
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.llama_cpp_session import LlamaCppSession

PROMPT = "<|im_start|>user\nWrite a long story about a robot who learns to paint.<|im_end|>\n<|im_start|>assistant\n"
NEW_TOKENS = 128


class TimedDecode:
    """The llama_cpp module with ``llama_decode`` timed: (start, end) of every call."""

    def __init__(self, module):
        self.module = module
        self.calls: list[tuple[float, float]] = []

    def __getattr__(self, name):
        return getattr(self.module, name)

    def llama_decode(self, context, batch):
        start = time.perf_counter()
        status = self.module.llama_decode(context, batch)
        self.calls.append((start, time.perf_counter()))
        return status


def bare_loop(session: LlamaCppSession, prompt: list[int]) -> None:
    """Greedy decoding with nothing but the batch, the decode and an argmax."""
    session.reset()
    token = int(session.extend(prompt)[-1].argmax())
    past, llama = len(session.cached), session._llama
    for index in range(NEW_TOKENS - 1):
        session._fill_batch([token], [past + index], [[0]], True)
        llama.llama_decode(session._context, session._batch)
        row = np.ctypeslib.as_array(llama.llama_get_logits(session._context), shape=(1, session.vocab_size))
        token = int(row[0].argmax())
    session.reset()  # the loop wrote the cache behind the session's back


class PoolParams(ctypes.Structure):
    """ggml.h ``struct ggml_threadpool_params`` (GGML_MAX_N_THREADS = 512)."""

    _fields_ = [("cpumask", ctypes.c_bool * 512), ("n_threads", ctypes.c_int), ("prio", ctypes.c_int),
                ("poll", ctypes.c_uint32), ("strict_cpu", ctypes.c_bool), ("paused", ctypes.c_bool)]


def pooled_loop(session: LlamaCppSession, prompt: list[int], threads: int):
    """:func:`bare_loop` with a persistent thread pool attached to the session's context for its run."""
    import llama_cpp

    folder = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    base, cpu, llama = (ctypes.CDLL(os.path.join(folder, name)) for name in ("libggml-base.so", "libggml-cpu.so", "libllama.so"))
    base.ggml_threadpool_params_init.argtypes = [ctypes.POINTER(PoolParams), ctypes.c_int]
    cpu.ggml_threadpool_new.argtypes = [ctypes.POINTER(PoolParams)]
    cpu.ggml_threadpool_new.restype = ctypes.c_void_p
    llama.llama_attach_threadpool.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    llama.llama_detach_threadpool.argtypes = [ctypes.c_void_p]
    params = PoolParams()
    base.ggml_threadpool_params_init(ctypes.byref(params), threads)  # llama.cpp's defaults: poll 50
    pool = cpu.ggml_threadpool_new(ctypes.byref(params))
    context = session._context if isinstance(session._context, int) else ctypes.cast(session._context, ctypes.c_void_p).value

    def run() -> None:
        llama.llama_attach_threadpool(context, pool, pool)
        try:
            bare_loop(session, prompt)
        finally:
            llama.llama_detach_threadpool(context)
    return run


def plan_engines(plan_path: str, threads: int) -> tuple[LlamaCppSession, dict]:
    """The target session of a llama.cpp plan, its engine and the plain engine over the same session."""
    from specplan.api import Runner

    runner = Runner.open(plan_path, threads=threads).plan_runner
    engine = runner.engine
    engine.eos_ids = runner.plain.eos_ids = set()  # every run decodes its whole budget
    return engine.target, {"plan engine": engine, "plain engine": runner.plain}


def inside_and_gap(timed: TimedDecode, run) -> tuple[float, float]:
    """Median ms inside a one-token decode and between two of them, over one run."""
    timed.calls.clear()
    run()
    calls = timed.calls[2:]  # the prefill's decode and the first step
    inside = [end - start for start, end in calls]
    gaps = [calls[index + 1][0] - calls[index][1] for index in range(len(calls) - 1)]
    return 1000 * statistics.median(inside), 1000 * statistics.median(gaps)


def graph_rebuild(session: LlamaCppSession, prompt: list[int], repeats: int) -> dict[str, float]:
    """Median ms of a one-token decode after one of the same width, and after a 4-token decode."""
    session.reset()
    session.extend(prompt)
    context = list(session.cached)

    def one(width: int) -> float:
        start = time.perf_counter()
        session.extend(context[:width])
        elapsed = 1000 * (time.perf_counter() - start)
        session.rewind_to(context + [0])  # keep exactly the prompt cached
        return elapsed

    after = {"after a one-token decode": [], "after a 4-token decode": []}
    for _ in range(8 * repeats):
        one(1)
        after["after a one-token decode"].append(one(1))
        one(4)
        after["after a 4-token decode"].append(one(1))
    return {name: statistics.median(times) for name, times in after.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default", help="`default` or a .gguf file")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--thread-pool", action="store_true", help="also the bare loop on a persistent thread pool")
    parser.add_argument("--plan", help="a llama.cpp plan.yaml: time its engine beside the plain one")
    args = parser.parse_args()
    if args.plan:
        session, engines = plan_engines(args.plan, args.threads)
        path = args.plan
    else:
        path = default_gguf_path() if args.model == "default" else args.model
        session = LlamaCppSession(path, n_ctx=4096, threads=args.threads, exact=False)
        engines = {"engine": SpeculativeEngine(session, torch.device("cpu"), eos_ids=set())}
    timed = TimedDecode(session._llama)
    session._llama = timed
    prompt = session.tokenize(PROMPT, add_special=False)
    ways = {"bare": lambda: bare_loop(session, prompt)}
    for name, engine in engines.items():
        ways[name] = lambda engine=engine: engine.generate(prompt, NEW_TOKENS, SamplingConfig())
    if args.thread_pool:
        ways["bare, persistent pool"] = pooled_loop(session, prompt, args.threads)
    for run in ways.values():
        run()  # warm-up
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for repeat in range(args.repeats):
        for name in (list(ways) if repeat % 2 == 0 else list(ways)[::-1]):
            results[name].append(inside_and_gap(timed, ways[name]))
    print(f"{path} ({args.threads} threads), {NEW_TOKENS} tokens, medians of {args.repeats} runs each")
    print("| loop | ms inside a decode | ms between decodes |")
    print("|---|---:|---:|")
    for name, rows in results.items():
        print(f"| {name} | {statistics.median(r[0] for r in rows):.3f} | {statistics.median(r[1] for r in rows):.3f} |")
    session._llama = timed.module
    print("\n| one-token decode | ms |\n|---|---:|")
    for name, ms in graph_rebuild(session, prompt, args.repeats).items():
        print(f"| {name} | {ms:.3f} |")
    session.close()


if __name__ == "__main__":
    main()
