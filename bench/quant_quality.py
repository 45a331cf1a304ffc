"""How much a 4-bit variant changes the model: greedy agreement with the 16-bit model and perplexity.

Terms (defined once):
- *reference output*: the 16-bit model's own greedy continuation of a prompt.
- *greedy agreement*: over every position of the reference outputs, the fraction where the
  variant's top-1 token (teacher-forced on prompt + reference prefix) equals the reference
  token. It is the per-token acceptance a 16-bit drafter would see from this variant as the
  verifier (greedy), so it bounds what quantizing the target costs speculative decoding.
- *matching prefix*: tokens the variant's own greedy output shares with the reference output
  before they first differ (free-running; capped at ``max_new_tokens``).
- *perplexity*: exp of the mean negative log-likelihood per predicted token of the prompts'
  own text (human-written Spec-Bench questions, no chat template).

References: GPTQ (arXiv 2210.17323) and QLoRA (arXiv 2305.14314) report perplexity; agreement
with the unquantized model as a speculative-decoding quantity follows QSpec / SpecMQuant
(arXiv 2505.22179).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from specplan.core.prompts import Prompt
from specplan.models.load import LoadedModel


@dataclass(frozen=True)
class ReferenceOutput:
    prompt_ids: tuple[int, ...]  # [prompt_tokens] chat-templated prompt
    output_ids: tuple[int, ...]  # [new_tokens] the 16-bit model's greedy continuation
    text_ids: tuple[int, ...]  # [text_tokens] the prompt's plain text, for perplexity


@dataclass(frozen=True)
class QualityReport:
    quant: str  # the variant's label (none | nf4 | gptq-w4g64)
    prompts: int
    greedy_agreement: float  # in [0, 1], see the module docstring
    matching_prefix: float  # mean tokens before the first difference
    identical_outputs: int  # prompts whose greedy output equals the reference exactly
    perplexity: float  # on the prompts' text


def greedy_output(loaded: LoadedModel, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """``loaded``'s plain greedy decoding of ``prompt_ids`` (stops at EOS)."""
    from specplan.runtime.build import eos_ids
    from specplan.runtime.drafters.base import SamplingConfig
    from specplan.runtime.engine import SpeculativeEngine

    engine = SpeculativeEngine(loaded.model, next(loaded.model.parameters()).device, eos_ids(loaded))
    return list(engine.generate(prompt_ids, max_new_tokens, SamplingConfig()).token_ids)


def reference_outputs(reference: LoadedModel, prompts: list[Prompt], max_new_tokens: int) -> list[ReferenceOutput]:
    """The 16-bit model's greedy continuations of ``prompts`` (compute once, compare many variants)."""
    from specplan.models.chat import encode_prompt

    outputs = []
    for prompt in prompts:
        prompt_ids = encode_prompt(reference.tokenizer, prompt.text)
        text_ids = reference.tokenizer(prompt.text)["input_ids"]
        outputs.append(ReferenceOutput(tuple(prompt_ids), tuple(greedy_output(reference, prompt_ids, max_new_tokens)),
                                       tuple(int(t) for t in text_ids)))
    return outputs


@torch.inference_mode()
def _logits(model: torch.nn.Module, ids: tuple[int, ...]) -> torch.Tensor:
    """Float32 logits [len(ids), vocab] of one causal forward without a cache."""
    device = next(model.parameters()).device
    return model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits[0].float()


def agreement_counts(model: torch.nn.Module, item: ReferenceOutput) -> tuple[int, int]:
    """(positions where ``model``'s top-1 equals the reference token, positions) for one prompt."""
    if not item.output_ids:
        return 0, 0
    logits = _logits(model, item.prompt_ids + item.output_ids)  # [prompt + output, vocab]
    start = len(item.prompt_ids) - 1  # row predicting the first output token
    predicted = logits[start : start + len(item.output_ids)].argmax(-1)  # [output]
    expected = torch.tensor(item.output_ids, device=predicted.device)
    return int((predicted == expected).sum()), len(item.output_ids)


def perplexity(model: torch.nn.Module, rows: list[tuple[int, ...]]) -> float:
    """exp(mean NLL per predicted token) of ``model`` over token rows (each row's first token is context)."""
    total, count = 0.0, 0
    for ids in rows:
        if len(ids) < 2:
            continue
        logits = _logits(model, ids)  # [len, vocab]
        targets = torch.tensor(ids[1:], device=logits.device)
        total += float(torch.nn.functional.cross_entropy(logits[:-1], targets, reduction="sum"))
        count += len(ids) - 1
    return math.exp(total / max(1, count))


def matching_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """Length of the common prefix of two token sequences.

    >>> matching_prefix((1, 2, 3), (1, 2, 4, 5))
    2
    """
    length = 0
    while length < min(len(a), len(b)) and a[length] == b[length]:
        length += 1
    return length


def compare_quality(candidate: LoadedModel, quant: str, references: list[ReferenceOutput],
                    max_new_tokens: int, free_running: bool = True) -> QualityReport:
    """Greedy agreement, matching prefix and perplexity of ``candidate`` against ``references``.

    ``free_running=False`` skips the candidate's own decoding (matching prefix and identical
    outputs are then reported as -1): teacher-forced agreement needs one forward per prompt.
    """
    agreed = positions = identical = 0
    prefixes = []
    for item in references:
        hits, count = agreement_counts(candidate.model, item)
        agreed, positions = agreed + hits, positions + count
        if free_running:
            own = tuple(greedy_output(candidate, list(item.prompt_ids), max_new_tokens))
            prefixes.append(matching_prefix(own, item.output_ids))
            identical += int(own == item.output_ids)
    return QualityReport(
        quant=quant, prompts=len(references), greedy_agreement=agreed / max(1, positions),
        matching_prefix=sum(prefixes) / len(prefixes) if prefixes else -1.0,
        identical_outputs=identical if free_running else -1,
        perplexity=perplexity(candidate.model, [item.text_ids for item in references]),
    )
