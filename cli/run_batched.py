"""``specplan run PLAN --batch B``: the prompts decoded B at a time, together (each on an engine of the
plan, their forwards batched; each round plays the schedule's row for the prompts in flight), through
:meth:`specplan.api.Runner.generate_batches` (docs/guide.md, "Batched runs"); here the records and lines
it prints."""

from __future__ import annotations

import json

from specplan.api import Batch, Runner
from specplan.cli.options import chosen_runtime
from specplan.core.errors import SpecplanError
from specplan.core.prompts import Prompt


def check_batch_arguments(args) -> None:
    """One-line errors for what a batched run cannot do (before any model loads)."""
    if args.stream:
        raise SpecplanError("--stream prints one sequence as it decodes; drop it with --batch")


def _comparison(plan_runner, prompt_ids: list[int], token_ids: tuple[int, ...], max_new_tokens: int) -> dict:
    """The prompt decoded alone by plain greedy decoding, and whether the batched output equals it."""
    from specplan.runtime.drafters.base import SamplingConfig
    from specplan.runtime.lossless import divergence_gap, first_divergence

    alone = plan_runner.generate(prompt_ids, max_new_tokens, SamplingConfig(), plain=True)
    index = first_divergence(alone.token_ids, token_ids)
    record = {"identical_to_plain": index is None, "plain_seconds": alone.seconds}
    if index is not None:
        record["first_divergence"] = index
        record["divergence_gap"] = round(divergence_gap(plan_runner.reference_model, prompt_ids, alone.token_ids, index), 4)
    return record


def _records(runner: Runner, batch: Batch, args) -> list[dict]:
    """One ``run --json`` record per prompt of ``batch``."""
    plan_runner, result = runner.plan_runner, batch.result
    tokenizer = plan_runner.target.tokenizer
    records = []
    for prompt, ids, sequence in zip(batch.prompts, batch.prompt_ids, result.sequences):
        record = {"prompt_id": prompt.prompt_id, "category": prompt.category, "batch": len(batch.prompts),
                  "new_tokens": len(sequence.token_ids), "token_ids": list(sequence.token_ids),
                  "text": tokenizer.decode(sequence.token_ids, skip_special_tokens=True),
                  "target_forwards": len(sequence.committed_per_forward),
                  "mean_accepted": round(sequence.mean_accepted, 4), "stop_reason": sequence.stop_reason,
                  "batch_seconds": round(result.seconds, 4), "batch_tokens_per_s": round(result.tokens_per_s, 3)}
        if args.compare_plain:
            record.update(_comparison(plan_runner, ids, sequence.token_ids, args.max_new_tokens))
        record.update({"configuration": batch.configuration, "predicted_batch_tokens_per_s": batch.predicted_tokens_per_s,
                       "plan": str(args.plan)})
        records.append(record)
    return records


def run_batched(args, prompts: list[Prompt]) -> int:
    """Decode ``prompts`` in batches of ``args.batch``; one record (or text and a line) per prompt."""
    check_batch_arguments(args)
    runner = Runner.open(args.plan, runtime=chosen_runtime(args), force=args.force, batch=args.batch,
                         threads=args.threads)
    temperature = runner.plan.temperature if args.temperature is None else args.temperature
    if args.compare_plain and temperature > 0:
        raise SpecplanError(f"--compare-plain checks greedy output against plain decoding; at temperature {temperature} "
                            "pass --temperature 0 with it")
    for batch in runner.generate_batches(prompts, max_new_tokens=args.max_new_tokens, temperature=temperature,
                                         top_p=args.top_p, seed=args.seed):
        records = _records(runner, batch, args)
        for record in records:
            if args.json:
                print(json.dumps(record, ensure_ascii=False), flush=True)
            else:
                print(record["text"])
                print(_sequence_line(record, runner.plan_runner.target.dtype), flush=True)
        if not args.json:
            print(_batch_line(records, batch), flush=True)
    return 0


def _sequence_line(record: dict, dtype: str) -> str:
    line = (f"[specplan] {record['prompt_id']}: {record['new_tokens']} tokens, {record['mean_accepted']:.2f} "
            f"tokens per target forward ({record['stop_reason']})")
    if "identical_to_plain" in record:
        line += "; identical to plain decoding alone: " + ("yes" if record["identical_to_plain"] else
                                                           _parting(record, dtype))
    return line


def _parting(record: dict, dtype: str) -> str:
    """Where a batched output parts from the prompt alone, and whether that is a near-tie of 16-bit or
    llama.cpp arithmetic (batched kernels sum in another order; runtime/lossless.py) or a lossless failure."""
    from specplan.runtime.lossless import NEAR_TIE

    where = f"no, parts at new token {record['first_divergence']}, top-2 logit gap {record['divergence_gap']}"
    if dtype == "gguf" and record["divergence_gap"] < NEAR_TIE:  # the llama.cpp backend
        return (f"{where}: a llama.cpp near-tie (< {NEAR_TIE}): a batch rounds differently from one-token decodes "
                "(docs/backends.md), not a lossless failure")
    if dtype != "float32" and record["divergence_gap"] < NEAR_TIE:
        return f"{where}: a {dtype} near-tie (< {NEAR_TIE}), not a lossless failure; float32 is token-identical"
    return f"{where}: NOT a near-tie; a lossless failure, please report it"


def _batch_line(records: list[dict], batch: Batch) -> str:
    result, predicted = batch.result, batch.predicted_tokens_per_s
    line = (f"[specplan] batch of {len(records)}: {result.new_tokens} tokens in {result.seconds:.2f} s: "
            f"{result.tokens_per_s:.1f} tok/s for the batch, {result.steps} batched forwards "
            f"({batch.configuration}, from {batch.source}")
    line += f"; predicted {predicted:.1f} tok/s)" if predicted is not None else ")"
    if records and "plain_seconds" in records[0]:
        alone = sum(record["plain_seconds"] for record in records)
        line += (f"; plain decoding one prompt at a time {result.new_tokens / alone:.1f} tok/s, "
                 f"{sum(record['identical_to_plain'] for record in records)}/{len(records)} outputs identical")
    return line
