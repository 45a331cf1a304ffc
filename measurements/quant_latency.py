"""Latency curves T(n) of MODEL at 16 bits and 4 bits (NF4, GPTQ): ms per forward of n new
tokens over a warm cache of ``--context`` tokens, the quantity ``specplan profile`` records.

The variants are measured in interleaved rounds (round r measures every variant once) and
each point is the median over rounds, so that load from other processes on a shared machine
biases no variant more than another. ``--clock wall`` (default) is what ``specplan profile``
records; ``--clock cpu`` reads the process's CPU time with one thread instead, which other
processes competing for the cores barely change (use it to see the curves' shape on a busy
machine; it is not a wall-clock latency). Run:

    .venv/bin/python measurements/quant_latency.py [--model default] [--quants none,nf4,gptq]
        [--rounds 3] [--repeats 5] [--context 256] [--threads 2] [--clock wall|cpu] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from specplan.core.prompts import spec_bench_split, stratified
from specplan.models.chat import encode_prompt
from specplan.models.load import quiet_transformers
from specplan.profiler.latency import WIDTHS, measure_latency
from specplan.runtime.session import ModelSession


def context_ids(tokenizer, length: int) -> list[int]:
    """``length`` tokens of chat-templated calibration prompts (as ``specplan profile`` uses)."""
    ids: list[int] = []
    for prompt in stratified(spec_bench_split("calibration"), 40):
        ids.extend(encode_prompt(tokenizer, prompt.text))
        if len(ids) >= length:
            break
    return (ids * (length // max(1, len(ids)) + 1))[:length]


def cpu_time_curve(model: torch.nn.Module, context: list[int], repeats: int) -> tuple[float, ...]:
    """Median process CPU ms per forward of each width (one warm-up each), like measure_latency."""
    session = ModelSession(model, torch.device("cpu"))
    session.extend(context)
    medians = []
    for width in WIDTHS:
        samples = []
        for attempt in range(repeats + 1):
            begin = time.process_time()
            session.extend(context[:width])
            elapsed = (time.process_time() - begin) * 1000.0
            session.rewind_to(context + [0])
            if attempt:
                samples.append(elapsed)
        medians.append(statistics.median(samples))
    return tuple(medians)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--quants", default="none,nf4,gptq")
    parser.add_argument("--dtype", default="bfloat16", help="16-bit dtype and NF4 compute dtype")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="timed forwards per width per round (median)")
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (--clock cpu uses 1)")
    parser.add_argument("--clock", default="wall", choices=["wall", "cpu"])
    parser.add_argument("--json", default=None, help="also write the table as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1 if args.clock == "cpu" else args.threads)
    quiet_transformers()
    from specplan.quant.load import load_model_variant as load_variant

    quants = args.quants.split(",")
    models = {quant: load_variant(args.model, args.dtype, "cpu", quant) for quant in quants}
    context = context_ids(next(iter(models.values())).tokenizer, args.context)
    samples: dict[str, list[tuple[float, ...]]] = {quant: [] for quant in quants}
    for round_index in range(args.rounds):
        for quant, loaded in models.items():
            if args.clock == "cpu":
                ms = cpu_time_curve(loaded.model, context, args.repeats)
            else:
                ms = measure_latency(loaded.model, torch.device("cpu"), context, WIDTHS, args.repeats).ms
            samples[quant].append(ms)
            print(f"round {round_index + 1}/{args.rounds} {quant}: " + " ".join(f"{v:.1f}" for v in ms), flush=True)
    table = {quant: [round(statistics.median(point), 1) for point in zip(*rows)] for quant, rows in samples.items()}
    names = {"none": args.dtype}
    print(f"\n{args.clock}-clock ms per forward of n new tokens over a {args.context}-token cache "
          f"({torch.get_num_threads()} threads, median of {args.rounds} rounds x {args.repeats} repeats)\n")
    print("| n | " + " | ".join(str(n) for n in WIDTHS) + " |")
    print("|---" * (len(WIDTHS) + 1) + "|")
    for quant, row in table.items():
        print(f"| {names.get(quant, quant)} | " + " | ".join(f"{v:.1f}" for v in row) + " |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"widths": list(WIDTHS), "context": args.context, "clock": args.clock,
                       "threads": torch.get_num_threads(), "ms": table}, handle, indent=2)


if __name__ == "__main__":
    main()
