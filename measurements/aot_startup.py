"""What a command-line user pays for compiled steps, per fresh process: ahead-of-time
packages (runtime ``compiled``) beside eager and in-process compilation (runtime ``jit``), all in
one run, every runtime in a fresh process of its own.

1. cold: ``specplan compile MODEL --rebuild`` with an empty inductor cache (the package's build time);
2. for each runtime, a fresh process loads the model, prepares its steps (loads the package,
   or nothing: eager, or compiles as widths are met: jit, exactly as ``specplan run`` does),
   then greedy-decodes the same Spec-Bench evaluation prompts: seconds to load the model, to
   prepare the steps, the first prompt's tok/s and the steady rate (median of the others), and
   whether each prompt's tokens equal eager's (float32: they must).

    .venv/bin/python measurements/aot_startup.py --model default --limit 6 --max-new-tokens 96 [--json OUT]

The goal (docs/guide.md, "Compiled steps ahead of time"): with packages present, the first
prompt within 10% of the steady rate, and output token-identical to eager in float32.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

RUNTIMES = ("eager", "compiled", "jit")


def child(args) -> None:
    """One fresh process: load, prepare, decode; one JSON line on stdout."""
    from specplan.core.quiet import quiet_libraries

    quiet_libraries(verbose=False)
    import torch

    from specplan.core.prompts import stratified
    from specplan.core.runtime_modes import RuntimeMode
    from specplan.core.workloads import workload_split
    from specplan.models.chat import encode_prompt
    from specplan.models.load import load_model
    from specplan.runtime.build import eos_ids
    from specplan.runtime.drafters.base import SamplingConfig
    from specplan.runtime.engine import SpeculativeEngine

    begin = time.perf_counter()
    loaded = load_model(args.model, args.dtype)
    loaded_at = time.perf_counter()
    engine = SpeculativeEngine(loaded.model, torch.device("cpu"), eos_ids(loaded), runtime=RuntimeMode(args.child))
    prepared_at = time.perf_counter()
    prompts = stratified(workload_split(args.workload, "evaluation"), args.limit)
    rows = []
    for prompt in prompts:
        ids = encode_prompt(loaded.tokenizer, prompt.text)
        result = engine.generate(ids, args.max_new_tokens, SamplingConfig())
        rows.append({"prompt_id": prompt.prompt_id, "tokens": list(result.token_ids), "seconds": result.seconds,
                     "tokens_per_s": result.tokens_per_s})
    print(json.dumps({"runtime": args.child, "load_model_s": loaded_at - begin, "prepare_s": prepared_at - loaded_at,
                      "threads": torch.get_num_threads(), "rows": rows}))


def run_json(command: list[str], environment: dict, what: str) -> dict:
    """Run ``command`` as a fresh process; its last stdout line as JSON, plus ``process_s``."""
    begin = time.perf_counter()
    output = subprocess.run(command, capture_output=True, text=True, env=environment, check=False)
    if output.returncode != 0:
        raise SystemExit(f"{what} failed:\n{output.stderr[-2000:]}")
    record = json.loads(output.stdout.strip().splitlines()[-1])
    record["process_s"] = time.perf_counter() - begin
    return record


def run_child(args, runtime: str, environment: dict) -> dict:
    command = [sys.executable, __file__, "--child", runtime, "--model", args.model, "--dtype", args.dtype,
               "--workload", args.workload, "--limit", str(args.limit), "--max-new-tokens", str(args.max_new_tokens)]
    return run_json(command, environment, f"the {runtime} process")


def cold_build(args, environment: dict) -> dict:
    """``specplan compile MODEL --rebuild`` with a fresh inductor cache: the package's cold build."""
    command = [os.path.join(os.path.dirname(sys.executable), "specplan"), "compile", args.model, "--dtype", args.dtype,
               "--rebuild", "--json"]
    return run_json(command, environment, "specplan compile")


def summarise(record: dict, reference: dict) -> dict:
    rates = [row["tokens_per_s"] for row in record["rows"]]
    steady = statistics.median(rates[1:]) if len(rates) > 1 else rates[0]
    identical = sum(row["tokens"] == base["tokens"] for row, base in zip(record["rows"], reference["rows"]))
    return {"runtime": record["runtime"], "process_s": round(record["process_s"], 1),
            "load_model_s": round(record["load_model_s"], 2), "prepare_s": round(record["prepare_s"], 2),
            "first_prompt_s": round(record["rows"][0]["seconds"], 2), "first_tok_s": round(rates[0], 2),
            "steady_tok_s": round(steady, 2), "first_over_steady": round(rates[0] / steady, 3),
            "identical_to_eager": f"{identical}/{len(record['rows'])}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--workload", default="spec-bench")
    parser.add_argument("--limit", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--no-cold", action="store_true", help="skip the cold package build")
    parser.add_argument("--runtimes", default=",".join(RUNTIMES),
                        help="comma list of runtimes to run, eager first (default: eager,compiled,jit)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", choices=RUNTIMES, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    environment = dict(os.environ)
    result = {"model": args.model, "dtype": args.dtype, "prompts": args.limit, "max_new_tokens": args.max_new_tokens}
    with tempfile.TemporaryDirectory(prefix="inductor-cold-") as inductor_cache:
        if not args.no_cold:
            result["cold_build"] = cold_build(args, {**environment, "TORCHINDUCTOR_CACHE_DIR": inductor_cache})
            print(f"cold build: {result['cold_build']['seconds']} s ({result['cold_build']['package']})", flush=True)
    chosen = [name for name in args.runtimes.split(",") if name]
    if chosen[:1] != ["eager"] or not set(chosen) <= set(RUNTIMES):
        raise SystemExit(f"--runtimes: eager first, then any of {', '.join(RUNTIMES[1:])}")
    records = {runtime: run_child(args, runtime, environment) for runtime in chosen}
    table = [summarise(records[runtime], records["eager"]) for runtime in chosen]
    eager_steady = table[0]["steady_tok_s"]
    print(f"{args.model} ({args.dtype}), {args.limit} Spec-Bench evaluation prompts x {args.max_new_tokens} new tokens, "
          f"plain greedy decoding, {records['eager']['threads']} threads, each runtime a fresh process")
    print("| runtime | process s | load model s | prepare steps s | first prompt s | first tok/s | steady tok/s | "
          "first / steady | steady / eager | identical to eager |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for line in table:
        line["steady_over_eager"] = round(line["steady_tok_s"] / eager_steady, 3)
        print(f"| {line['runtime']} | {line['process_s']} | {line['load_model_s']} | {line['prepare_s']} | "
              f"{line['first_prompt_s']} | {line['first_tok_s']} | {line['steady_tok_s']} | {line['first_over_steady']} | "
              f"{line['steady_over_eager']} | {line['identical_to_eager']} |")
    result["table"] = table
    if args.json:
        from specplan.core.files import write_text_atomic

        write_text_atomic(args.json, json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
