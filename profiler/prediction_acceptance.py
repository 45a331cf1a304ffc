"""A client's prediction replayed as a drafter over the target's greedy outputs (docs/planner-math.md
section 12.6): what the planner costs its lengths from (planner/prediction.py).

Calibration prompts may carry the answer a client would send as OpenAI's ``prediction`` (humaneval-edit:
the function it asks to edit; a prompts file: a ``prediction`` field, core/prompts.py). For each
candidate ``(first, min_match)`` of core/prediction.py, :func:`replay_prediction` plays the rounds the
runtime plays over each output with that prediction, through :class:`PredictionDrafter` itself (its
alignment and its chain growth are never re-implemented here): a round at output position ``t`` asks the
drafter for a chain, capped as the runtime's sequence round caps it (at most 63 tokens, and one less
than the tokens the budget has left, runtime/stage.py), accepts its leading tokens equal to the
output's and commits the bonus token, so the next round starts at ``t + accepted + 1`` (the round
structure of profiler/acceptance.py). A round whose draft matched up to the output's end commits the
rest of the output and ends it (at EOS: the prediction holds no special tokens). Nothing aligned
drafts nothing: a plain round, as with no plan drafter to fall back on. No model runs: the replay
costs only the drafter's own calls, which are timed for ``ms_per_call``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from specplan.core.limits import LONGEST_LOOKUP_CHAIN
from specplan.core.prediction import FIRST_CHAINS, MIN_MATCHES, PredictionCalibration, PredictionCandidate
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.prediction import PredictionDrafter, prediction_tokens


@dataclass(frozen=True)
class ReplayedRound:
    """One round: ``drafted`` tokens proposed from the prediction, ``accepted`` of them equal to the output's."""

    drafted: int
    accepted: int


def replay_prediction(prediction: Sequence[int], prompt_ids: Sequence[int], output_ids: Sequence[int], first: int,
                      min_match: int, max_new_tokens: int) -> tuple[list[ReplayedRound], float]:
    """The rounds a prediction drafter at ``first`` / ``min_match`` plays over one greedy output of a
    request for ``max_new_tokens`` tokens, and the seconds its draft calls took.

    >>> rounds, _ = replay_prediction([10, 11, 12, 13], [1], [10, 11, 7, 12, 13, 2], 2, 1, 64)
    >>> [(r.drafted, r.accepted) for r in rounds]
    [(2, 2), (0, 0), (1, 1)]
    """
    drafter = PredictionDrafter(prediction, len(prompt_ids), None, 0, first=first, min_match=min_match)
    committed = list(prompt_ids)
    output = list(output_ids)
    rounds: list[ReplayedRound] = []
    seconds, start = 0.0, 0
    while start < len(output):
        committed.extend(output[len(committed) - len(prompt_ids):start])
        budget = min(LONGEST_LOOKUP_CHAIN, max_new_tokens - start - 1)
        draft: tuple[int, ...] = ()
        if budget > 0:  # the runtime asks no draft of a round that may commit one token only
            begin = time.perf_counter()
            draft = drafter.propose(committed, budget, SamplingConfig(), None).tokens
            seconds += time.perf_counter() - begin
        accepted = 0
        while accepted < min(len(draft), len(output) - start) and draft[accepted] == output[start + accepted]:
            accepted += 1
        rounds.append(ReplayedRound(len(draft), accepted))
        start += accepted + 1  # past the output's end when the draft matched up to it: the output ends
    return rounds, seconds


def prediction_calibration(pairs: Sequence[tuple[list[int], list[int]]], predictions: Sequence[str], tokenizer,
                           max_new_tokens: int) -> PredictionCalibration | None:
    """Every candidate's rounds over the ``pairs`` (prompt ids, the target's greedy output ids) whose prompt
    carried a prediction (``predictions``, one text per pair, "" for none); None where none did."""
    chosen = [(prediction_tokens(tokenizer, text), prompt_ids, output_ids)
              for text, (prompt_ids, output_ids) in zip(predictions, pairs) if text]
    if not chosen:
        return None
    candidates, seconds, calls = [], 0.0, 0
    for first in FIRST_CHAINS:
        for min_match in MIN_MATCHES:
            drafted: Counter[int] = Counter()
            accepted = 0
            for prediction, prompt_ids, output_ids in chosen:
                rounds, spent = replay_prediction(prediction, prompt_ids, output_ids, first, min_match, max_new_tokens)
                drafted.update(r.drafted for r in rounds)
                accepted += sum(r.accepted for r in rounds)
                seconds += spent
                calls += len(rounds)
            candidates.append(PredictionCandidate(first, min_match, tuple(sorted(drafted.items())), accepted))
    tokens = sum(len(output_ids) for _, _, output_ids in chosen)
    return PredictionCalibration(len(chosen), tokens, 1000.0 * seconds / max(1, calls), tuple(candidates))
