"""How far a forward pass of our runtime is from what this machine's memory allows.

Per model and precision: the bytes one forward must read (the weights once, plus the KV cache
of ``--context`` tokens), this machine's measured read bandwidth (the best of several timed
sums over a 1 GiB tensor), and the roofline floor (Williams, Waterman and Patterson,
"Roofline", CACM 52(4), 2009)::

    floor(n) = max( (weight_bytes + kv_bytes) / bandwidth,  2 * parameters * n / matmul_rate )

where ``matmul_rate`` is a measured GEMM rate in the model's dtype (flops = 2 per weight per
token; attention flops are negligible at this context). Then the measured T(n) of each
runtime (``eager``: transformers' forward over our cache; ``static``: the preallocated cache;
``compiled``: torch.compile'd steps over it) for n = 1..64 over a warm ``--context``-token
cache, and the ratio T(n) / floor(n). Runtimes are measured in interleaved rounds (round r
measures each runtime once) and each point is the median over rounds, so that load from other
processes biases no runtime more than another. Compile time is reported apart (each width's
warm-up compiles its graph). ``--clock cpu --threads 1`` reads this process's CPU time, which
other processes competing for the cores barely change. Run:

    .venv/bin/python measurements/forward_floor.py [--model default] [--dtypes bfloat16,float32]
        [--runtimes eager,static,compiled] [--rounds 3] [--repeats 5] [--context 256]
        [--threads 2] [--clock wall|cpu] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from quant_latency import context_ids  # noqa: E402 - the sibling benchmark (its folder is on sys.path)

from specplan.models.load import load_model, quiet_transformers
from specplan.core.runtime_modes import RuntimeMode
from specplan.profiler.latency import WIDTHS
from specplan.runtime.session import ModelSession

BANDWIDTH_BYTES = 1 << 30  # the tensor summed to measure read bandwidth


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the model's distinct parameter storages (a tied embedding counts once)."""
    seen: dict[int, int] = {}
    for parameter in model.parameters():
        seen[parameter.data_ptr()] = parameter.numel() * parameter.element_size()
    return sum(seen.values())


def kv_bytes(model: torch.nn.Module, context: int) -> int:
    """Bytes of keys and values of ``context`` cached tokens over every layer (read once per forward)."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = 2 * config.num_key_value_heads * head_dim * model.dtype.itemsize
    return per_token * context * config.num_hidden_layers


def read_bandwidth(repeats: int = 5) -> float:
    """Bytes per second of the fastest of ``repeats`` sums over a 1 GiB float32 tensor."""
    data = torch.ones(BANDWIDTH_BYTES // 4, dtype=torch.float32)
    data.sum()  # fault the pages in
    best = min(_seconds(lambda: data.sum()) for _ in range(repeats))
    return BANDWIDTH_BYTES / best


def matmul_rate(dtype: torch.dtype, repeats: int = 5) -> float:
    """Flops per second of the fastest of ``repeats`` [256 x 2048] @ [2048 x 2048] products in ``dtype``."""
    left, right = torch.randn(256, 2048, dtype=dtype), torch.randn(2048, 2048, dtype=dtype)
    left @ right
    best = min(_seconds(lambda: left @ right) for _ in range(repeats))
    return 2 * 256 * 2048 * 2048 / best


def _seconds(function) -> float:
    begin = time.perf_counter()
    function()
    return time.perf_counter() - begin


def floor_ms(model: torch.nn.Module, context: int, bandwidth: float, rate: float) -> list[float]:
    """Roofline floor (ms) per width in WIDTHS (formula in the module docstring)."""
    parameters = sum({p.data_ptr(): p.numel() for p in model.parameters()}.values())
    memory = (weight_bytes(model) + kv_bytes(model, context)) / bandwidth
    return [1000.0 * max(memory, 2 * parameters * n / rate) for n in WIDTHS]


def curve(session: ModelSession, context: list[int], repeats: int, clock: str) -> list[float]:
    """Median ms per forward of each width over a cache holding ``context`` (one warm-up each,
    which is where a compiled runtime compiles that width's graph), as the profiler measures."""
    read = time.process_time if clock == "cpu" else time.perf_counter
    medians = []
    for width in WIDTHS:
        samples = []
        for attempt in range(repeats + 1):
            begin = read()
            session.extend(context[:width])
            elapsed = (read() - begin) * 1000.0
            session.rewind_to(context + [0])
            if attempt:
                samples.append(elapsed)
        medians.append(statistics.median(samples))
    return medians


def measure_runtimes(model, context: list[int], runtimes: list[str], rounds: int, repeats: int, clock: str) -> dict:
    """Median over interleaved rounds of T(n) per runtime, and each runtime's compile seconds."""
    device = torch.device("cpu")
    sessions = {name: ModelSession(model, device, runtime=RuntimeMode(name)) for name in runtimes}
    for session in sessions.values():
        session.extend(context)  # prefill (eager for every runtime)
    samples: dict[str, list[list[float]]] = {name: [] for name in runtimes}
    for round_index in range(rounds):
        for name, session in sessions.items():
            samples[name].append(curve(session, context, repeats, clock))
            print(f"  round {round_index + 1}/{rounds} {name}: " + " ".join(f"{v:.1f}" for v in samples[name][-1]), flush=True)
    table = {name: [statistics.median(point) for point in zip(*rows)] for name, rows in samples.items()}
    return {"ms": table, "compile_seconds": {name: s.compile_seconds for name, s in sessions.items() if s.compiled}}


def print_table(title: str, floor: list[float], measured: dict) -> None:
    """Markdown: floor, each runtime's ms, and its ratio to the floor."""
    print(f"\n{title}\n")
    print("| n | " + " | ".join(str(n) for n in WIDTHS) + " |")
    print("|---" * (len(WIDTHS) + 1) + "|")
    print("| floor ms | " + " | ".join(f"{v:.1f}" for v in floor) + " |")
    for name, row in measured["ms"].items():
        print(f"| {name} ms | " + " | ".join(f"{v:.1f}" for v in row) + " |")
    for name, row in measured["ms"].items():
        print(f"| {name} / floor | " + " | ".join(f"{v / f:.1f}x" for v, f in zip(row, floor)) + " |")
    for name, seconds in measured["compile_seconds"].items():
        print(f"- {name}: compiling its {len(WIDTHS)} graphs took {seconds:.0f} s (once per process; not in the table)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtypes", default="bfloat16", help="comma list: bfloat16, float32, float16")
    parser.add_argument("--runtimes", default="eager,static,compiled", help="comma list: eager, static, compiled")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="timed forwards per width per round (median)")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                        help="cpu: this process's CPU time (use with --threads 1 on a busy machine)")
    parser.add_argument("--json", default=None, help="also write the tables as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    quiet_transformers()
    bandwidth = read_bandwidth()
    print(f"read bandwidth {bandwidth / 1e9:.1f} GB/s ({torch.get_num_threads()} threads, best of 5 sums of 1 GiB)")
    report = {"bandwidth_gb_s": bandwidth / 1e9, "widths": list(WIDTHS), "context": args.context,
              "threads": torch.get_num_threads(), "models": {}}
    for dtype in args.dtypes.split(","):
        loaded = load_model(args.model, dtype)
        model = loaded.model
        rate = matmul_rate(model.dtype)
        context = context_ids(loaded.tokenizer, args.context)
        floor = floor_ms(model, args.context, bandwidth, rate)
        print(f"{args.model} {dtype}: weights {weight_bytes(model) / 1e6:.1f} MB, KV cache "
              f"{kv_bytes(model, args.context) / 1e6:.1f} MB, matmul rate {rate / 1e9:.0f} GFLOP/s", flush=True)
        measured = measure_runtimes(model, context, args.runtimes.split(","), args.rounds, args.repeats, args.clock)
        print_table(f"{args.model} {dtype}: {args.clock}-clock ms per forward of n new tokens over a "
                    f"{args.context}-token cache ({torch.get_num_threads()} threads, median of {args.rounds} rounds "
                    f"x {args.repeats} repeats)", floor, measured)
        report["models"][f"{args.model}:{dtype}"] = {
            "weight_bytes": weight_bytes(model), "kv_bytes": kv_bytes(model, args.context),
            "matmul_gflop_s": rate / 1e9, "floor_ms": floor, **measured}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
