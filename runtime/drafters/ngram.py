"""Prompt-lookup drafting: continue the most recent earlier occurrence of the context's
last n-gram (n = N down to 1) in prompt + output.

Reference: Saxena, "Prompt Lookup Decoding" (2023), as shipped in transformers'
``prompt_lookup_num_tokens``; the retrieval family of Token Recycling (arXiv 2408.08696).
"""

from __future__ import annotations

import torch

from specplan.runtime.drafters.base import Drafter, Proposal, SamplingConfig


def lookup_continuation(context: list[int], max_ngram: int, length: int) -> tuple[int, ...]:
    """The ``length`` tokens that followed the most recent earlier match of the longest
    matching suffix n-gram (n <= max_ngram) of ``context``; empty if no n-gram recurs.

    >>> lookup_continuation([5, 6, 7, 8, 5, 6], 3, 2)
    (7, 8)
    >>> lookup_continuation([1, 2, 3], 2, 4)
    ()
    """
    size = len(context)
    for n in range(min(max_ngram, size - 1), 0, -1):
        suffix = context[size - n :]
        for start in range(size - n - 1, -1, -1):
            if context[start : start + n] == suffix:
                follow = context[start + n : start + n + length]
                if follow:
                    return tuple(follow)
    return ()


class NgramDrafter(Drafter):
    """``ngram:N`` — deterministic proposals (point-mass draft distribution)."""

    def __init__(self, max_ngram: int):
        self.max_ngram = max_ngram
        self.name = f"ngram-{max_ngram}"

    def reset(self) -> None:
        pass

    def propose(self, committed: list[int], gamma: int, sampling: SamplingConfig, generator: torch.Generator) -> Proposal:
        return Proposal(lookup_continuation(committed, self.max_ngram, gamma))
