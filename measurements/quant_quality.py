"""Quality of MODEL's 4-bit variants against its 16-bit self on Spec-Bench evaluation prompts:
greedy agreement, matching prefix, identical outputs and perplexity (terms defined in
``specplan.bench.quant_quality``). Run:

    .venv/bin/python measurements/quant_quality.py [--model default] [--quants nf4,gptq]
        [--limit 20] [--max-new-tokens 64] [--teacher-forced-only] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict

import torch

from specplan.core.prompts import spec_bench_split, stratified
from specplan.models.load import quiet_transformers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--quants", default="nf4,gptq", help="comma list of none | nf4 | gptq")
    parser.add_argument("--dtype", default="bfloat16", help="the 16-bit reference's dtype and NF4's compute dtype")
    parser.add_argument("--limit", type=int, default=20, help="evaluation prompts, spread over categories")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--teacher-forced-only", action="store_true", help="skip the variants' own decoding")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    quiet_transformers()
    from specplan.bench.quant_quality import compare_quality, perplexity, reference_outputs
    from specplan.profiler.variants import quant_label
    from specplan.quant.load import load_model_variant as load_variant

    prompts = stratified(spec_bench_split("evaluation"), args.limit)
    reference = load_variant(args.model, args.dtype, "cpu", "none")
    start = time.perf_counter()
    references = reference_outputs(reference, prompts, args.max_new_tokens)
    print(f"reference: {len(references)} greedy outputs of {args.model} ({args.dtype}) in "
          f"{time.perf_counter() - start:.0f} s", flush=True)
    rows = [{"quant": f"none ({args.dtype})", "greedy_agreement": 1.0, "matching_prefix": None,
             "identical_outputs": len(references),
             "perplexity": perplexity(reference.model, [item.text_ids for item in references])}]
    for quant in args.quants.split(","):
        loaded = load_variant(args.model, args.dtype, "cpu", quant)
        start = time.perf_counter()
        report = compare_quality(loaded, quant_label(loaded, quant), references, args.max_new_tokens,
                                 free_running=not args.teacher_forced_only)
        rows.append(asdict(report))
        print(f"{report.quant}: {time.perf_counter() - start:.0f} s", flush=True)
    print(f"\n{len(references)} Spec-Bench evaluation prompts, {args.max_new_tokens} new tokens\n")
    print("| model | greedy agreement | matching prefix (mean tokens) | identical outputs | perplexity (prompts) |")
    print("|---|---|---|---|---|")
    for row in rows:
        prefix = "-" if row["matching_prefix"] in (None, -1.0) else f"{row['matching_prefix']:.1f}"
        print(f"| {row['quant']} | {row['greedy_agreement']:.3f} | {prefix} | {row['identical_outputs']}/{len(references)} "
              f"| {row['perplexity']:.2f} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
