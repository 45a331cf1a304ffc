"""A client's prediction replayed as a drafter over greedy outputs (profiler/prediction_acceptance.py): a
hand-worked example (doubling, a lost alignment, realignment, the prediction's end), the budget cap, the
rounds the runtime itself plays with the same drafter on a tiny model, and the profile's candidates."""

from __future__ import annotations

import pytest

from specplan.core.prediction import FIRST_CHAINS, MIN_MATCHES
from specplan.profiler.prediction_acceptance import prediction_calibration, replay_prediction
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.prediction import PredictionDrafter
from specplan.runtime.engine import SpeculativeEngine
from tests.runtime.test_engine import CPU, PROMPTS, reference_greedy
from tests.runtime.tiny_models import tiny_llama

PREDICTION = list(range(100, 140))  # p0..p39


def test_a_hand_worked_replay():
    # the output copies p0..p9, says 7, then copies p10..p29 and ends (2): first 1, realigned on 2 tokens
    output = PREDICTION[:10] + [7] + PREDICTION[10:30] + [2]
    rounds, _ = replay_prediction(PREDICTION, [1], output, first=1, min_match=2, max_new_tokens=64)
    assert [(r.drafted, r.accepted) for r in rounds] == [
        (1, 1),  # p0, bonus p1
        (3, 3),  # grown (a verify of 4): p2..p4, bonus p5
        (7, 4),  # grown (a verify of 8): p6..p12 drafted, p6..p9 accepted, bonus 7 (the edit)
        (0, 0),  # lost at 7; "p9 7" is not in the prediction: a plain round commits p10
        (0, 0),  # "7 p10" is not either: p11
        (1, 1),  # "p10 p11" found: back at the first chain, p12, bonus p13
        (3, 3),  # p14..p16, bonus p17
        (7, 7),  # p18..p24, bonus p25
        (14, 4),  # 15 asked, the prediction holds 14 more (p26..p39): p26..p29 accepted, bonus 2
    ]
    assert sum(r.accepted + 1 for r in rounds) == len(output)


def test_a_round_never_drafts_past_the_budget():
    rounds, _ = replay_prediction(PREDICTION, [1], PREDICTION[:10], first=4, min_match=2, max_new_tokens=10)
    assert [(r.drafted, r.accepted) for r in rounds] == [(4, 4), (4, 4)]  # the second asks 8, 4 are left after the bonus


def test_a_larger_min_match_aligns_later():
    output = PREDICTION[:4] + [7] + PREDICTION[5:12]
    short, _ = replay_prediction(PREDICTION, [1], output, first=4, min_match=1, max_new_tokens=64)
    long, _ = replay_prediction(PREDICTION, [1], output, first=4, min_match=3, max_new_tokens=64)
    # lost at 7 after a whole chain (grown to 9): realigned on "p5" alone, or three rounds later on "p5 p6 p7";
    # the chain a lost prediction keeps is the grown one (only a rejected draft returns it to first)
    assert [r.drafted for r in short] == [4, 0, 9]
    assert [r.drafted for r in long] == [4, 0, 0, 0, 9]


class Recording(PredictionDrafter):
    """The runtime's own drafter, recording what each of its proposals drafted."""

    def __init__(self, *args, **kwargs):
        self.proposed: list[int] = []
        super().__init__(*args, **kwargs)

    def propose(self, committed, gamma, sampling, generator):
        proposal = super().propose(committed, gamma, sampling, generator)
        self.proposed.append(len(proposal.tokens))
        return proposal


@pytest.fixture(scope="module")
def target():
    return tiny_llama("sdpa", seed=0)


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("first, min_match", [(1, 1), (4, 3), (16, 2)])
def test_the_replay_plays_the_runtimes_rounds(target, prompt, first, min_match):
    new = 40
    reference = reference_greedy(target, prompt, new)
    middle = len(reference) // 2
    for prediction in (reference, reference[:middle] + [7] + reference[middle + 1:],
                       reference[:middle] + [7, 8, 9] + reference[middle:], reference[:10] + reference[14:]):
        drafter = Recording(prediction, len(prompt), None, 0, first=first, min_match=min_match)
        engine = SpeculativeEngine(target, CPU, set(), drafter, gamma=63, fixed_chain=True)
        result = engine.generate(prompt, new, SamplingConfig())
        assert list(result.token_ids) == reference
        rounds, _ = replay_prediction(prediction, prompt, reference, first, min_match, new)
        assert [r.drafted for r in rounds][:len(drafter.proposed)] == drafter.proposed
        committed = []
        start = 0
        for r in rounds:
            committed.append(min(r.accepted + 1, new - start))
            start += committed[-1]
        assert tuple(committed) == result.committed_per_forward


class Words:
    """A tokenizer of space-separated integers, as the profile's tokenizer is called."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [int(word) for word in text.split()]}


def test_the_profile_replays_every_candidate_over_the_prompts_that_carry_a_prediction():
    output = PREDICTION[:10] + [7] + PREDICTION[10:30] + [2]
    pairs = [([1], output), ([1], [5, 6, 7]), ([1], PREDICTION[:5])]
    text = " ".join(str(token) for token in PREDICTION)
    calibration = prediction_calibration(pairs, [text, "", text], Words(), 64)
    assert (calibration.prompts, calibration.tokens) == (2, len(output) + 5)
    assert [(c.first, c.min_match) for c in calibration.candidates] == [(f, m) for f in FIRST_CHAINS for m in MIN_MATCHES]
    hand = next(c for c in calibration.candidates if (c.first, c.min_match) == (1, 2))
    # the hand-worked output's rounds, then the second copy: p0 (bonus p1), p2..p4 of three (the output ends)
    assert dict(hand.drafted) == {0: 2, 1: 3, 3: 3, 7: 2, 14: 1}
    assert hand.accepted == 1 + 3 + 4 + 1 + 3 + 7 + 4 + 1 + 3
    assert prediction_calibration(pairs, ["", "", ""], Words(), 64) is None
