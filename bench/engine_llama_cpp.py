"""``specplan bench PLAN --engine llama.cpp``: the exported llama.cpp configuration, measured.

The plan's profile is exported for llama.cpp (:func:`specplan.planner.export.export_plan`), and
the exported setting runs in llama-cpp-python on the target's GGUF beside llama.cpp's plain
decoding, on the same prompts, alternating prompt by prompt:

- an n-gram drafter: llama-cpp-python's ``LlamaPromptLookupDecoding`` with the exported
  ``--spec-ngram-simple-size-n`` / ``-size-m`` (llama-server's ``ngram-simple`` matches exactly
  n tokens, the lookup tries n down to 1: close, not the same);
- a model drafter: its GGUF (the one ``--spec-draft-model`` names) drafting ``--spec-draft-n-max``
  greedy tokens through a second ``Llama`` (:class:`GreedyDraft`): llama-cpp-python has no
  draft-model loop of its own, and llama-server is not installed here;
- plain decoding when the export chose none.

Decode speed is ms per new token after the first (the prompt's prefill left out), the quantity
the planner predicts (planner-math.md section 2, ms/token); the prediction is the export's own
(``L_engine``), from the profile's latencies: specplan's runtime, or llama.cpp's own after
``specplan profile --engine llama.cpp``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specplan.bench.llamacpp_peer import CONTEXT_STEP, LlamaCppMethod, TimedDraft
from specplan.runtime.drafters.base import SamplingConfig


class GreedyDraft:
    """A llama-cpp-python draft model: ``gamma`` greedy tokens of a second GGUF model.

    ``Llama.generate(reset=True)`` keeps the longest prefix its cache shares with the new
    input, so each call evaluates only the tokens accepted since the last one."""

    def __init__(self, llm, gamma: int):
        self.llm = llm
        self.gamma = gamma

    def __call__(self, input_ids, /, **_) -> np.ndarray:
        tokens = []
        for token in self.llm.generate([int(token) for token in input_ids], temp=0.0, top_k=1, top_p=1.0, min_p=0.0,
                                       repeat_penalty=1.0, reset=True):
            tokens.append(int(token))
            if len(tokens) == self.gamma:
                break
        return np.array(tokens, dtype=np.intc)


@dataclass(frozen=True)
class EngineRow:
    """One method over all prompts: decode ms per token, and its outputs."""

    name: str
    description: str
    decode_ms_per_token: float
    new_tokens: int
    outputs: tuple[tuple[int, ...], ...]


def decode_ms(measurement) -> tuple[float, int]:
    """(decode seconds, decoded tokens) of one run: the prefill call and the first token left out."""
    tokens = len(measurement.token_ids)
    return measurement.seconds - (measurement.prefill_seconds or 0.0), max(tokens - 1, 0)


def methods(gguf: str, stage, source: str, names, eos: set[int], context: int, threads: int) -> list[LlamaCppMethod]:
    """llama.cpp plain decoding and the exported setting (plain again when the export has no stage)."""
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    context = -(-context // CONTEXT_STEP) * CONTEXT_STEP
    options = {"n_ctx": context, "n_threads": threads, "n_threads_batch": threads, "n_gpu_layers": 0, "verbose": False}
    greedy = SamplingConfig()
    plain = LlamaCppMethod("llama.cpp", llama_cpp.Llama(model_path=gguf, **options), eos, greedy,
                           "llama.cpp plain decoding", {})
    if stage is None:
        return [plain]
    gamma = stage.shape.gamma
    kind, _, argument = source.partition(":")
    if kind == "ngram":
        draft = TimedDraft(LlamaPromptLookupDecoding(max_ngram_size=int(argument), num_pred_tokens=gamma))
        description = f"llama.cpp prompt lookup, size n {argument}, size m {gamma}"
    else:
        drafter = names.name(argument, "llama.cpp")
        draft = TimedDraft(GreedyDraft(llama_cpp.Llama(model_path=drafter, **options), gamma))
        description = f"llama.cpp with draft model {drafter}, {gamma} greedy drafts"
    # logits_all=True as a draft model implies: llama-cpp-python sizes its logits buffer by the argument, so
    # without it a context longer than n_batch (512) overruns the buffer
    exported = LlamaCppMethod("exported", llama_cpp.Llama(model_path=gguf, draft_model=draft, logits_all=True, **options),
                              eos, greedy, description, {"gamma": gamma}, draft=draft)
    return [plain, exported]


def run_engine_bench(runs: list[LlamaCppMethod], prompts: list[list[int]], max_new_tokens: int) -> list[EngineRow]:
    """Every method on every prompt, methods alternating per prompt; one row per method."""
    totals = {method.name: [0.0, 0, []] for method in runs}
    for prompt_ids in prompts:
        for method in runs:
            measurement = method.run(prompt_ids, max_new_tokens)
            seconds, tokens = decode_ms(measurement)
            totals[method.name][0] += seconds
            totals[method.name][1] += tokens
            totals[method.name][2].append(measurement.token_ids)
    return [EngineRow(method.name, method.description,
                      1e3 * totals[method.name][0] / max(totals[method.name][1], 1), totals[method.name][1],
                      tuple(totals[method.name][2])) for method in runs]


def agreement(rows: list[EngineRow]) -> float:
    """Share of prompts whose exported output equals llama.cpp's plain output token for token."""
    if len(rows) < 2:
        return 1.0
    pairs = list(zip(rows[0].outputs, rows[1].outputs))
    return sum(plain == exported for plain, exported in pairs) / max(len(pairs), 1)

