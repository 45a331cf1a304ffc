"""measurements/replay_lookup.py replays a lookup plan's rounds over an answer as the runtime played them."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "measurements"))
from replay_lookup import replay  # noqa: E402

from specplan.runtime.drafters.base import SamplingConfig  # noqa: E402
from specplan.runtime.drafters.ngram import NgramDrafter  # noqa: E402
from specplan.runtime.engine import SpeculativeEngine  # noqa: E402
from tests.runtime.tiny_models import tiny_llama  # noqa: E402

PROMPTS = [[1, 5, 9, 5, 9, 5, 9, 12], [3, 4, 5, 6, 7, 3, 4, 5], [20, 21, 22, 23, 24, 25, 26, 27, 28, 20, 21]]


class Recording(NgramDrafter):
    """An n-gram drafter that notes the length of every draft it proposes."""

    def __init__(self, max_ngram: int):
        super().__init__(max_ngram)
        self.drafted: list[int] = []

    def propose(self, committed, gamma, sampling, generator):
        proposal = super().propose(committed, gamma, sampling, generator)
        self.drafted.append(len(proposal.tokens))
        return proposal


def test_the_replay_plays_the_runtimes_rounds_over_its_answer():
    target = tiny_llama("sdpa", seed=0)
    played, replayed = Recording(3), Recording(3)
    engine = SpeculativeEngine(target, torch.device("cpu"), eos_ids=set(), drafter=played, gamma=4)
    for prompt in PROMPTS:
        played.drafted.clear()
        played.reset()
        replayed.drafted.clear()
        result = engine.generate(prompt, 24, SamplingConfig())
        milliseconds, rounds = replay(replayed, 4, prompt, list(result.token_ids), 24, lambda drafted: drafted + 1.0)
        assert rounds == result.target_forwards
        assert replayed.drafted == played.drafted and any(replayed.drafted)  # the same drafts, capped alike at the end
        assert milliseconds == sum(replayed.drafted) + rounds  # each round costs its verify width
        oracle, _ = replay(replayed, 4, prompt, list(result.token_ids), 24, lambda accepted: accepted + 1.0, oracle=True)
        assert oracle == len(result.token_ids)  # drafting only what is accepted: one width per committed token
