"""A lookup match is drafted only where the matches like it that came before paid for their verify
(docs/planner-math.md section 12.5, "A match drafted on its kind's record").

A prompt lookup's match is a copy or a coincidence, and the match itself does not say which: it is
found at the drafter's shortest n-gram whatever follows. Over the target's greedy answers on the
home EPYC (the pair, ``ngram-12-6``, 40 evaluation prompts each), matches into the prompt copied 58
tokens on HumanEval and 32 on humaneval-edit but 4 on Spec-Bench, and matches into the answer itself
copied 3 on Spec-Bench and on edits. What tells them apart is the record of earlier matches of the
same kind in the same engine: this request's and the ones before it.

:class:`MatchGate` keeps, per source (the prompt, or the answer so far), the copy lengths of the
last ``COPY_HISTORY`` matches: how many tokens the target went on to commit as the match predicted.
A length is read off the committed text, so a match the gate declined is measured as well as one
it drafted (the target commits the same tokens either way at temperature 0; with sampling a point
draft is accepted with the probability that the target samples it, which the committed token is a
draw of). Before a match is drafted, the gate costs drafting it over the recorded lengths of its
kind (:meth:`MatchGate.saved`: the chain now, the plan's gamma after a chain accepted whole, each
round's verify at the profile's T(n) / T(1) plain tokens) and drafts where the mean saves time. A
match that has already held ``k`` tokens beyond the shortest n-gram (found at a longer n-gram) is
costed on the recorded matches that held ``k`` tokens, their lengths less ``k``: one declined at
first is drafted once it has held long enough that matches like it went on copying. Fewer than
``LEAST_EVIDENCE`` such records: the match is drafted (the plan's calibration chose the lookup).

Lossless as chain growth (section 12.5): whether round ``k`` drafts depends only on the text
committed before it and on earlier requests; a round that drafts nothing is a plain round.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from specplan.core.limits import grown_chain

COPY_HISTORY = 64  # copy lengths kept per source, across requests
LEAST_EVIDENCE = 4  # records a decision needs; with fewer the match is drafted
SOURCES = ("prompt", "answer")


@dataclass
class OpenMatch:
    """A match whose copy may still be running: the text at ``position`` on is compared with the text
    at ``origin`` on; ``length`` tokens agreed so far; ``held``: tokens it held before it was found."""

    source: str
    position: int
    origin: int
    held: int
    length: int = 0
    drafted: bool = False

    @property
    def offset(self) -> int:
        return self.position - self.origin


class MatchGate:
    """Whether a lookup drafts a match (module docstring). ``gamma``: the plan's chain, drafted after a
    chain accepted whole; ``verify_ms``: the target's T(n), read as ratios to T(1); ``longest``: the chain
    growth reaches from ``gamma`` (runtime/fallback.py ``ChainGrowth.reach``; ``gamma``: chains do not grow).

    >>> gate = MatchGate(gamma=8, verify_ms=lambda n: 10.0 + 5.0 * n)  # T(n) / T(1) = (2 + n) / 3
    >>> gate.allows([1, 2, 3, 9, 1, 2, 3], origin=3, held=0, chain=4)  # no record yet: drafted
    True
    >>> gate.start()  # the next request; every earlier match into the prompt was a coincidence
    >>> for _ in range(LEAST_EVIDENCE):
    ...     gate.record("prompt", 0)
    >>> gate.allows([5, 6, 7, 4, 5, 6, 7], origin=3, held=0, chain=4)
    False
    >>> round(gate.saved(remaining=4, chain=4), 2), round(gate.saved(remaining=0, chain=4), 2)
    (2.67, -1.33)

    A copy is priced on the rounds the runtime plays it in: with chains that grow, a chain of 1 accepted whole
    goes on at 3, 7, 15, 31. On SmolLM2's T(n) (T(2) costs 1.84 plain tokens) a copy of 60 tokens drafted one
    a round saves 4 plain tokens; grown, 31.

    >>> smollm2 = {1: 6.5, 2: 11.9, 4: 17.9, 8: 27.8, 16: 48.3, 32: 90.8, 64: 159.2}.get
    >>> round(MatchGate(1, smollm2).saved(60, chain=1), 1), round(MatchGate(1, smollm2, longest=63).saved(60, chain=1), 1)
    (4.2, 30.7)
    """

    def __init__(self, gamma: int, verify_ms: Callable[[int], float], history: int = COPY_HISTORY,
                 least: int = LEAST_EVIDENCE, longest: int | None = None):
        self.gamma = gamma
        self.longest = gamma if longest is None else max(gamma, longest)
        self.verify_ms = verify_ms
        self.least = least
        self.lengths = {source: deque(maxlen=history) for source in SOURCES}
        self.open: list[OpenMatch] = []
        self.text: list[int] = []  # the request's committed text, as last seen
        self.prompt_length: int | None = None
        self.declined = 0

    def start(self) -> None:
        """A new request: the last one's open matches are measured on its text as last seen."""
        for match in self.open:
            self._advance(match)
            self.record(match.source, match.held + match.length)
        self.open, self.text, self.prompt_length = [], [], None

    def record(self, source: str, length: int) -> None:
        self.lengths[source].append(length)

    def observe(self, text: list[int]) -> None:
        """See the committed text: matches whose copy broke are measured and recorded."""
        self.text = text
        if self.prompt_length is None:
            self.prompt_length = len(text)  # the first round's text is the prompt
        still = []
        for match in self.open:
            if self._advance(match):
                still.append(match)
            else:
                self.record(match.source, match.held + match.length)
        self.open = still

    def _advance(self, match: OpenMatch) -> bool:
        """Compare the text committed since; False once the copy broke."""
        text = self.text
        while match.position + match.length < len(text):
            if text[match.position + match.length] != text[match.origin + match.length]:
                return False
            match.length += 1
        return True

    def allows(self, text: list[int], origin: int, held: int, chain: int) -> bool:
        """Draft ``chain`` tokens of the match whose continuation starts at ``text[origin]``, found at an
        n-gram ``held`` tokens longer than the drafter's shortest?"""
        self.observe(text)
        match = next((m for m in self.open if m.offset == len(text) - origin), None)
        if match is None:
            source = "prompt" if origin < self.prompt_length else "answer"
            match = OpenMatch(source, len(text), origin, held)
            self.open.append(match)
            if len(self.open) > COPY_HISTORY:  # text repeating at many periods at once: record the oldest as it stands
                oldest = self.open.pop(0)
                self.record(oldest.source, oldest.held + oldest.length)
        elif match.drafted:
            return True  # a copy the gate already drafted, still holding
        held = match.held + match.length
        lengths = [length - held for length in self.lengths[match.source] if length >= held]
        match.drafted = len(lengths) < self.least or sum(self.saved(length, chain) for length in lengths) > 0
        self.declined += not match.drafted
        return match.drafted

    def saved(self, remaining: int, chain: int) -> float:
        """Plain tokens' time saved by drafting a match whose copy runs ``remaining`` more tokens: a round of
        ``chain``, then, while each is accepted whole (a bonus token continues the copy), rounds of the plan's
        gamma after a shorter first chain, else of the chain grown from the last one (ChainGrowth.record),
        each costing T(drafted + 1) / T(1) plain tokens and committing its accepted tokens and one more
        (Leviathan et al., arXiv 2211.17192: a round commits its accepted draft and the target's token)."""
        plain_ms, spent, committed = self.verify_ms(1), 0.0, 0
        while True:
            accepted = min(remaining, chain)
            spent += self.verify_ms(chain + 1) / plain_ms
            committed += accepted + 1
            if accepted < chain or remaining == accepted:
                return committed - spent
            remaining -= accepted + 1
            chain = self.gamma if chain < self.gamma else grown_chain(chain, self.longest)
