"""A lookup drafts a match only where earlier matches of its kind paid (runtime/match_gate.py,
docs/planner-math.md section 12.5)."""

from __future__ import annotations

import torch

from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.fallback import FallbackGuard
from specplan.runtime.match_gate import LEAST_EVIDENCE, MatchGate
from tests.runtime.test_engine import reference_greedy
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")
STEEP = lambda n: 1.0 + n  # noqa: E731  T(c + 1) / T(1) = (c + 2) / 2: a chain of 4 costs 3 plain tokens
PROMPT_TEXT = [7, 8, 9, 10, 11, 3, 7, 8, 9]  # the last three tokens recur at 0: the match continues at 3


def gate_with(records: list[int], source: str = "prompt") -> MatchGate:
    gate = MatchGate(gamma=8, verify_ms=STEEP)
    for length in records:
        gate.record(source, length)
    return gate


def test_saving_is_worked_by_hand():
    gate = MatchGate(gamma=8, verify_ms=STEEP)
    assert gate.saved(0, 4) == 1 - 3  # one token for a chain of 4's verify
    # a copy of 20: 4 accepted + bonus (5 for 3), then 8 + bonus (9 for 5), then 6 of 8 + 1 (7 for 5)
    assert gate.saved(20, 4) == (5 + 9 + 7) - (3 + 5 + 5)
    assert gate.saved(4, 4) == 5 - 3  # the copy ends with the chain: the bonus is the target's own


def test_a_copy_is_priced_on_the_chains_growth_plays_it_in():
    """A plan of chains of 1 whose chains grow (3, 7, 15 after whole accepts) on a curve where a round of one
    draft saves nothing (T(2) = 2 T(1): 2 tokens for 2) and wider verifies cost little more: a copy of 20 is
    worked by hand on those rounds, and records of copies of 20 decline a fresh match where chains stay at 1
    and draft it where they grow."""
    wide_is_cheap = {1: 1.0, 2: 2.0, 4: 2.5, 8: 3.0, 16: 4.0, 32: 6.0, 64: 10.0}.get
    grows = MatchGate(gamma=1, verify_ms=wide_is_cheap, longest=63)
    # 1 + 1 (2 for 2), 3 + 1 (4 for 2.5), 7 + 1 (8 for 3), then 6 of 15 + 1 (7 for 4)
    assert grows.saved(20, 1) == (2 + 4 + 8 + 7) - (2 + 2.5 + 3 + 4)
    flat = MatchGate(gamma=1, verify_ms=wide_is_cheap)
    assert flat.saved(20, 1) == 21 - 11 * 2  # ten rounds of 2 for 2, then one of the copy's end
    for gate in (grows, flat):
        for length in [0] * LEAST_EVIDENCE + [20] * LEAST_EVIDENCE:
            gate.record("prompt", length)
    assert grows.allows(PROMPT_TEXT, origin=3, held=0, chain=1)
    assert not flat.allows(PROMPT_TEXT, origin=3, held=0, chain=1)


def test_matches_of_a_kind_that_were_coincidences_are_declined_and_copies_are_drafted():
    assert not gate_with([0] * LEAST_EVIDENCE).allows(PROMPT_TEXT, origin=3, held=0, chain=4)
    assert gate_with([30] * LEAST_EVIDENCE).allows(PROMPT_TEXT, origin=3, held=0, chain=4)
    assert gate_with([0] * (LEAST_EVIDENCE - 1)).allows(PROMPT_TEXT, origin=3, held=0, chain=4)  # too few records
    # the records of the other source do not count: matches into the answer had no record yet
    assert gate_with([0] * LEAST_EVIDENCE, source="answer").allows(PROMPT_TEXT, origin=3, held=0, chain=4)


def test_a_match_that_held_is_costed_on_the_matches_that_held_as_long():
    """20 coincidences and 4 copies of 20: a fresh match loses on average (20 x -2 + 4 x 8 < 0); one found
    a token longer is costed on the copies alone (lengths 19) and drafted."""
    records = [0] * 20 + [20] * 4
    assert not gate_with(records).allows(PROMPT_TEXT, origin=3, held=0, chain=4)
    assert gate_with(records).allows(PROMPT_TEXT, origin=3, held=1, chain=4)


def test_a_declined_match_is_measured_off_the_text_the_target_committed():
    gate = gate_with([0] * LEAST_EVIDENCE)
    text = list(PROMPT_TEXT)
    assert not gate.allows(text, origin=3, held=0, chain=4)  # the match predicts 10, 11, 3, 7, 8, 9, ...
    gate.observe(text + [10, 11, 3])
    assert len(gate.lengths["prompt"]) == LEAST_EVIDENCE  # still copying: nothing recorded yet
    gate.observe(text + [10, 11, 3, 5])
    assert list(gate.lengths["prompt"])[-1] == 3 and gate.open == []
    assert gate.declined == 1


def test_a_match_still_open_when_the_request_ends_is_recorded_at_its_length():
    gate = gate_with([])
    assert gate.allows(list(PROMPT_TEXT), origin=3, held=0, chain=4)
    gate.observe(PROMPT_TEXT + [10, 11])
    gate.start()  # the next request
    assert list(gate.lengths["prompt"]) == [2] and gate.open == [] and gate.prompt_length is None


def test_a_drafted_copy_that_holds_is_not_costed_again():
    gate = gate_with([])
    assert gate.allows(list(PROMPT_TEXT), origin=3, held=0, chain=4)
    for _ in range(LEAST_EVIDENCE):
        gate.record("prompt", 0)  # records that would now decline a fresh match
    text = PROMPT_TEXT + [10, 11]
    assert gate.allows(text, origin=5, held=2, chain=8)  # the same match two tokens on (same offset)
    assert gate.declined == 0


def test_an_engine_whose_gate_declines_matches_stays_the_targets():
    """A tiny random model soon repeats itself; with coincidences recorded for both sources the gate
    declines fresh matches (their rounds are plain ones) until a match holds, and measures them: the
    output is the target's greedy decoding, and the gate's records grow by the matches it saw."""
    target = tiny_llama("sdpa", seed=0)
    prompt = [1, 5, 9, 13, 17, 21, 25]
    guard = FallbackGuard(plain_ms=1000.0, cost=lambda played, seconds, tokens: 1.0 if played == "plain" else 0.5)
    drafter = NgramDrafter(3, 2)
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=drafter, gamma=8, guard=guard, verify_ms=STEEP)
    assert drafter.gate is not None
    for source in ("prompt", "answer"):
        for _ in range(LEAST_EVIDENCE):
            drafter.gate.record(source, 0)
    result = engine.generate(prompt, 96, SamplingConfig())
    assert list(result.token_ids) == reference_greedy(target, prompt, 96)
    assert drafter.gate.declined > 0
    ungated = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=NgramDrafter(3, 2), gamma=8, guard=guard)
    assert ungated.stage.drafter.gate is None  # no T(n): no gate
    assert len(ungated.generate(prompt, 96, SamplingConfig()).committed_per_forward) < len(result.committed_per_forward)
