"""Prompt-lookup drafting: continue the most recent earlier occurrence of the context's
last n-gram (n = N down to 1) in prompt + output.

Reference: Saxena, "Prompt Lookup Decoding" (2023), as shipped in transformers'
``prompt_lookup_num_tokens``; the retrieval family of Token Recycling (arXiv 2408.08696).
"""

from __future__ import annotations

import torch

from specplan.runtime.drafters.base import Drafter, Proposal, SamplingConfig
from specplan.runtime.match_gate import MatchGate


def lookup_continuation(context: list[int], max_ngram: int, length: int, min_ngram: int = 1) -> tuple[int, ...]:
    """The ``length`` tokens that followed the most recent earlier match of the longest
    matching suffix n-gram (min_ngram <= n <= max_ngram) of ``context``; empty if none recurs.

    >>> lookup_continuation([5, 6, 7, 8, 5, 6], 3, 2)
    (7, 8)
    >>> lookup_continuation([1, 2, 3], 2, 4)
    ()
    >>> lookup_continuation([5, 6, 7, 8, 9, 6], 3, 2), lookup_continuation([5, 6, 7, 8, 9, 6], 3, 2, min_ngram=2)
    ((7, 8), ())
    """
    size = len(context)
    for n in range(min(max_ngram, size - 1), min_ngram - 1, -1):
        suffix = context[size - n :]
        for start in range(size - n - 1, -1, -1):
            if context[start : start + n] == suffix:
                follow = context[start + n : start + n + length]
                if follow:
                    return tuple(follow)
    return ()


class NgramIndex:
    """:func:`lookup_continuation` over a growing context in O(N) per call: the most recent start
    of every n-gram (n <= N) that ends before the context's last token, kept as the context grows
    (a context that does not extend the indexed one, another prompt, starts the index over)."""

    def __init__(self, max_ngram: int, min_ngram: int = 1):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.tokens: list[int] = []  # the indexed text: the context without its last token
        self.last: dict[tuple[int, ...], int] = {}  # n-gram -> its most recent start in ``tokens``

    def _extend(self, context: list[int]) -> None:
        seen = len(self.tokens)
        if len(context) - 1 < seen or context[:seen] != self.tokens:
            self.tokens, self.last, seen = [], {}, 0
        for end in range(seen, len(context) - 1):
            self.tokens.append(context[end])
            for n in range(1, min(self.max_ngram, end + 1) + 1):
                self.last[tuple(self.tokens[end - n + 1: end + 1])] = end - n + 1

    def continuation(self, context: list[int], length: int) -> tuple[int, ...]:
        """``lookup_continuation(context, max_ngram, length, min_ngram)``.

        >>> NgramIndex(3).continuation([5, 6, 7, 8, 5, 6], 2)
        (7, 8)
        """
        return self.match(context, length)[2]

    def match(self, context: list[int], length: int) -> tuple[int, int, tuple[int, ...]]:
        """(where the continuation starts in ``context``, the n-gram's length, the continuation's first
        ``length`` tokens) of the match :meth:`continuation` drafts; (-1, 0, ()) where none recurs.

        >>> NgramIndex(3).match([5, 6, 7, 8, 5, 6], 2)
        (2, 2, (7, 8))
        """
        self._extend(context)
        size = len(context)
        for n in range(min(self.max_ngram, size - 1), self.min_ngram - 1, -1):
            start = self.last.get(tuple(context[size - n:]))
            if start is not None:
                return start + n, n, tuple(context[start + n: start + n + length])
        return -1, 0, ()


class NgramDrafter(Drafter):
    """``ngram:N`` / ``ngram:N:K`` — deterministic proposals (point-mass draft distribution).

    ``gate`` (set by the engine, runtime/match_gate.py): drafts a match only where earlier matches of
    its kind paid for their verify; a declined match proposes nothing (the round is a plain one)."""

    def __init__(self, max_ngram: int, min_ngram: int = 1):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.name = f"ngram-{max_ngram}" + (f"-{min_ngram}" if min_ngram > 1 else "")
        self.index = NgramIndex(max_ngram, min_ngram)
        self.gate: MatchGate | None = None

    def reset(self) -> None:
        self.index = NgramIndex(self.max_ngram, self.min_ngram)
        if self.gate is not None:
            self.gate.start()

    def propose(self, committed: list[int], gamma: int, sampling: SamplingConfig, generator: torch.Generator) -> Proposal:
        if self.gate is not None:
            self.gate.observe(committed)  # every round: the request's first text is its prompt
        if gamma < 1:
            return Proposal(())
        origin, size, tokens = self.index.match(committed, gamma)
        if tokens and self.gate is not None and not self.gate.allows(committed, origin, size - self.min_ngram, gamma):
            return Proposal(())
        return Proposal(tokens)
