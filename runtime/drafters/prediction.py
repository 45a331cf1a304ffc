"""Predicted Outputs as a draft source: the text the client expects back (OpenAI's ``prediction``,
as an editor sends the file it asks to change), followed in step with the output.

The prediction is never shown to the model; it only proposes draft tokens, which the target
verifies like any other (a point-mass proposal: lossless at every temperature, docs/planner-math.md
section 12.6). A ``position`` in the prediction follows the committed text: every committed token
equal to the prediction's next one moves it on; the first that differs loses it, and it is found
again where the output's last tokens (at least ``min_match``, up to ``MAX_MATCH``) occur in the
prediction, the match nearest after the place it was lost preferred (an edit moves forward through
the text it rewrites). Where the prediction has nothing aligned, the plan's own drafter proposes.

Draft length: a chain from the prediction starts at ``first`` tokens, grows after a chain accepted
whole, its verify width doubling (core/limits.py ``grown_chain``: c -> 2c + 1, up to
``LONGEST_LOOKUP_CHAIN``), and returns to ``first`` after a rejection,
the rule of :class:`~specplan.runtime.fallback.ChainGrowth` (section 12.5), applied here to every
target because a prediction, once aligned, is copied for whole spans. ``first`` and ``min_match`` come
from the plan's ``prediction`` section, solved from a replay of this drafter on the calibration
prompts (planner/prediction.py, profiler/prediction_acceptance.py), else from the fixed rule
(core/prediction.py ``rule_lengths``; runtime/build.py ``prediction_lengths``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch

from specplan.core.limits import LONGEST_LOOKUP_CHAIN, grown_chain
from specplan.core.prediction import FIRST_CHAIN, MIN_MATCH
from specplan.runtime.drafters.base import Drafter, Proposal, SamplingConfig

__all__ = ["FIRST_CHAIN", "MAX_MATCH", "MIN_MATCH", "PredictionDrafter", "prediction_tokens"]

MAX_MATCH = 8  # longest suffix compared when choosing among several occurrences


def prediction_tokens(tokenizer, text: str) -> list[int]:
    """A prediction's token ids as a request's is drafted (serve) and a calibration prompt's replayed
    (profiler): ``text`` tokenized without special tokens."""
    return [int(token) for token in tokenizer(text, add_special_tokens=False)["input_ids"]]


class PredictionDrafter(Drafter):
    """Drafts from ``prediction`` (token ids of the expected output) while it is aligned with the
    output, else from ``fallback`` (the plan's sequence drafter, at most ``fallback_gamma`` tokens).

    ``prompt_length``: the output starts after that many tokens of the committed text, and there the
    prediction does (the engine may have played plain rounds before it first asks for a draft).
    ``accepted`` / ``rejected`` count the prediction's draft tokens the target accepted / rejected
    (OpenAI's ``accepted_prediction_tokens`` / ``rejected_prediction_tokens``); :meth:`settle` counts
    the last draft once the request has ended.

    >>> drafter = PredictionDrafter([10, 11, 12, 13, 14], 2, None, 0)
    >>> drafter.propose([1, 2], 3, SamplingConfig(), None).tokens  # the prompt is [1, 2]
    (10, 11, 12)
    >>> drafter.propose([1, 2, 10, 11, 9], 3, SamplingConfig(), None).tokens  # 12 rejected: lost, no match
    ()
    >>> drafter.propose([1, 2, 10, 11, 9, 12, 13], 3, SamplingConfig(), None).tokens  # 12 13 found again
    (14,)
    >>> drafter.settle([1, 2, 10, 11, 9, 12, 13, 14]); drafter.accepted, drafter.rejected
    (3, 1)
    """

    name = "prediction"

    def __init__(self, prediction: Sequence[int], prompt_length: int, fallback: Drafter | None, fallback_gamma: int,
                 first: int = FIRST_CHAIN, longest: int = LONGEST_LOOKUP_CHAIN, min_match: int = MIN_MATCH):
        self.prediction = [int(token) for token in prediction]
        self.prompt_length = prompt_length
        self.fallback = fallback
        self.fallback_gamma = fallback_gamma
        self.first = first
        self.longest = max(first, longest)
        self.min_match = min_match
        self.max_match = max(MAX_MATCH, min_match)
        self.starts: dict[tuple[int, ...], list[int]] = defaultdict(list)  # min_match-gram -> where it starts
        for start in range(len(self.prediction) - min_match + 1):
            self.starts[tuple(self.prediction[start:start + min_match])].append(start)
        self.reset()

    def reset(self) -> None:
        self.position: int | None = 0  # the prediction's index of the next expected token; None: lost
        self.anchor = 0  # where it was last aligned
        self.seen = self.prompt_length  # committed tokens followed so far
        self.draft: tuple[int, ...] = ()  # the last proposal, when it came from the prediction
        self.chain = self.first
        self.accepted = 0
        self.rejected = 0
        if self.fallback is not None:
            self.fallback.reset()

    def propose(self, committed: list[int], gamma: int, sampling: SamplingConfig, generator: torch.Generator) -> Proposal:
        self._follow(committed)
        self.draft = ()
        if self.position is not None and gamma > 0:
            self.draft = tuple(self.prediction[self.position:self.position + min(gamma, self.chain)])
        if self.draft:
            return Proposal(self.draft)
        if self.fallback is None or gamma < 1 or self.fallback_gamma < 1:
            return Proposal(())
        return self.fallback.propose(committed, min(gamma, self.fallback_gamma), sampling, generator)

    def settle(self, committed: list[int]) -> None:
        """Count the last draft's fate against the request's final text (``committed``: prompt and output)."""
        self._follow(committed)
        self.draft = ()

    def _follow(self, committed: list[int]) -> None:
        """Count the last proposal's fate and move ``position`` along the tokens committed since."""
        new = committed[self.seen:]
        self.seen = len(committed)
        if not new:
            return
        if self.draft:
            kept = 0
            while kept < min(len(new), len(self.draft)) and new[kept] == self.draft[kept]:
                kept += 1
            self.accepted += kept
            self.rejected += len(self.draft) - kept
            self.chain = grown_chain(self.chain, self.longest) if kept == len(self.draft) else self.first
        for token in new:
            if self.position is not None and self.position < len(self.prediction) \
                    and self.prediction[self.position] == token:
                self.position += 1
                self.anchor = self.position
            else:
                self.position = None
        if self.position is None:
            self.position = self._align(committed)

    def _align(self, committed: list[int]) -> int | None:
        """The index after the best occurrence in the prediction of the output's last tokens, or None."""
        if len(committed) < self.min_match:
            return None
        best: tuple[int, int, int] | None = None  # (match length, after the anchor, -distance) -> larger wins
        best_end = None
        for start in self.starts.get(tuple(committed[-self.min_match:]), ()):
            end = start + self.min_match
            length = self.min_match
            while length < self.max_match and length < len(committed) and end - length - 1 >= 0 \
                    and committed[-length - 1] == self.prediction[end - length - 1]:
                length += 1
            key = (length, end >= self.anchor, -abs(end - self.anchor))
            if best is None or key > best:
                best, best_end = key, end
        return best_end if best_end is not None and best_end < len(self.prediction) else None

    def sessions(self):
        return [] if self.fallback is None else self.fallback.sessions()

    def drafters(self) -> list[Drafter]:
        return [self] + ([] if self.fallback is None else self.fallback.drafters())
