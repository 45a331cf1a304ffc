"""Calibration rows for GPTQ: Spec-Bench calibration prompts as the model will see them.

GPTQ (arXiv 2210.17323, section 4) needs only a small sample of inputs to estimate each
layer's Hessian H = 2 X X^T; we use the Spec-Bench calibration split (question_id divisible
by 4, never used by benchmarks), each prompt wrapped in the model's chat template, so the
activations match what the quantized target verifies at run time.
"""

from __future__ import annotations

from specplan.core.prompts import Prompt, spec_bench_split, stratified

CALIBRATION_LABEL = "spec-bench:calibration"
ROW_TOKENS = 2048  # prompts are packed into rows of at most this many tokens
DEFAULT_PROMPTS = 40  # spread over the 13 categories; ~12k tokens, ~2 min of GPTQ on 2 cores


def calibration_prompts(limit: int | None = None) -> list[Prompt]:
    """``limit`` (default DEFAULT_PROMPTS) prompts of the calibration split, spread over categories."""
    return stratified(spec_bench_split("calibration"), limit or DEFAULT_PROMPTS)


def pack(sequences: list[list[int]], row_tokens: int) -> list[list[int]]:
    """Concatenate whole sequences, in order, into rows of at most ``row_tokens`` tokens (a longer
    sequence gets a row of its own). GPTQModel runs one forward per row and layer, so a few
    long rows quantize several times faster than one short row per prompt; GPTQ's own
    calibration is likewise concatenated text (C4 windows of 2048 tokens).

    >>> pack([[1, 2], [3], [4, 5, 6], [7]], 3)
    [[1, 2, 3], [4, 5, 6], [7]]
    """
    rows: list[list[int]] = []
    for sequence in sequences:
        if rows and len(rows[-1]) + len(sequence) <= row_tokens:
            rows[-1] = rows[-1] + list(sequence)
        else:
            rows.append(list(sequence))
    return rows


def calibration_rows(tokenizer, prompts: list[Prompt], row_tokens: int = ROW_TOKENS) -> list[dict[str, list[int]]]:
    """``[{"input_ids": [...], "attention_mask": [1, ...]}, ...]``, the row format GPTQModel takes:
    the chat-templated prompts packed into rows of at most ``row_tokens`` tokens."""
    from specplan.models.chat import encode_prompt

    sequences = [encode_prompt(tokenizer, prompt.text) for prompt in prompts]
    return [{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in pack(sequences, row_tokens)]
