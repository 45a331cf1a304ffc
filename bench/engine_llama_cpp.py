"""``specplan bench PLAN --engine llama.cpp``: the exported llama.cpp configuration, measured.

The plan's profile is exported for llama.cpp (:func:`specplan.planner.export.export_plan`), and
the exported setting runs in llama-cpp-python on the target's GGUF beside llama.cpp's plain
decoding, on the same prompts, alternating prompt by prompt (:mod:`specplan.bench.engine_rows`;
the report, shared with transformers, is :mod:`specplan.bench.engine_report`):

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

import numpy as np

from specplan.core.drafter_spec import parse_drafter_spec
from specplan.runtime.llama_cpp_session import high_level_llama
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


def methods(gguf: str, stage, source: str, names, eos: set[int], context: int, threads: int) -> list[LlamaCppMethod]:
    """llama.cpp plain decoding and the exported setting (plain again when the export has no stage)."""
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    context = -(-context // CONTEXT_STEP) * CONTEXT_STEP
    options = {"n_ctx": context, "n_threads": threads, "n_threads_batch": threads, "n_gpu_layers": 0, "verbose": False}
    greedy = SamplingConfig()
    plain = LlamaCppMethod("llama.cpp", high_level_llama(model_path=gguf, **options), eos, greedy,
                           "llama.cpp plain decoding", {})
    if stage is None:
        return [plain]
    gamma = stage.shape.gamma
    kind, _, argument = source.partition(":")
    if kind == "ngram":
        longest = parse_drafter_spec(source).ngram_sizes[0]
        draft = TimedDraft(LlamaPromptLookupDecoding(max_ngram_size=longest, num_pred_tokens=gamma))
        description = f"llama.cpp prompt lookup, size n {longest}, size m {gamma}"
    else:
        drafter = names.name(argument, "llama.cpp")
        draft = TimedDraft(GreedyDraft(high_level_llama(model_path=drafter, **options), gamma))
        description = f"llama.cpp with draft model {drafter}, {gamma} greedy drafts"
    # logits_all=True as a draft model implies: llama-cpp-python sizes its logits buffer by the argument, so
    # without it a context longer than n_batch (512) overruns the buffer
    exported = LlamaCppMethod("exported", high_level_llama(model_path=gguf, draft_model=draft, logits_all=True, **options),
                              eos, greedy, description, {"gamma": gamma}, draft=draft)
    return [plain, exported]
