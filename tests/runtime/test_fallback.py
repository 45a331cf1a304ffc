"""The fallback guard (runtime/fallback.py, docs/planner-math.md section 12.5): the rule on given
costs, and an engine under it that stays token-identical to plain greedy decoding whether its
drafter always misses (the guard falls back) or always hits (the guard keeps the plan)."""

from __future__ import annotations

import pytest
import torch

from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.model import ModelDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.fallback import FIRST_BACKOFF, PLAIN_PROBE, PROBE_ROUNDS, FallbackGuard, GuardSettings
from tests.runtime.test_engine import reference_greedy
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")
PROMPT = [1, 5, 9, 5, 9, 5, 9, 12]


def play(guard: FallbackGuard, rounds: int, plan_seconds: float, plan_tokens: int, plain_seconds: float = 0.01,
         plan_verified: int = 0):
    """``rounds`` rounds as the guard chooses them; returns what played each. ``plan_verified``: tokens
    each plan round verified, all of its seconds (0: not reported)."""
    played = []
    for _ in range(rounds):
        choice = guard.choose()
        played.append(choice)
        if choice == "plain":
            guard.record("plain", plain_seconds, 1)
        else:
            guard.record("plan", plan_seconds, plan_tokens, plan_verified, plan_seconds if plan_verified else 0.0)
    return played


def test_a_plan_dearer_than_plain_falls_back_and_is_probed_again_with_a_growing_backoff():
    guard = FallbackGuard(plain_ms=10.0)
    played = play(guard, 4 + FIRST_BACKOFF + 4 + 2 * FIRST_BACKOFF + 1, plan_seconds=0.012, plan_tokens=1)
    assert played[:4] == ["plan"] * 4  # probed, then 16 plain, probed, then 32 plain
    assert played[4:4 + FIRST_BACKOFF] == ["plain"] * FIRST_BACKOFF
    assert played[4 + FIRST_BACKOFF:8 + FIRST_BACKOFF] == ["plan"] * 4
    assert played[8 + FIRST_BACKOFF:-1] == ["plain"] * (2 * FIRST_BACKOFF) and played[-1] == "plan"
    assert guard.switches == 2 and guard.plain_rounds == 3 * FIRST_BACKOFF


def test_a_plan_that_pays_is_kept_and_plain_is_measured_after_its_first_rounds_in_every_request():
    guard = FallbackGuard()
    played = play(guard, 40, plan_seconds=0.03, plan_tokens=4)  # 7.5 ms a token against 10
    assert played[:PROBE_ROUNDS] == ["plan"] * PROBE_ROUNDS  # the plan's first rounds (a prediction's best) come first
    assert played[PROBE_ROUNDS:PROBE_ROUNDS + PLAIN_PROBE] == ["plain"] * PLAIN_PROBE
    assert set(played[PROBE_ROUNDS + PLAIN_PROBE:]) == {"plan"} and guard.switches == 0
    guard.start()  # the next request measures plain decoding again
    assert play(guard, 10, plan_seconds=0.03, plan_tokens=4).count("plain") == PLAIN_PROBE


def test_a_plan_that_wins_by_far_on_its_own_verifies_plays_no_plain_round():
    """An aligned prediction: 40 tokens a round from a 64-token verify costing 10 plain tokens (the
    profile's T(64) = 10 T(1)). Its own verifies put a plain token at 10 ms against its 2.5 ms a
    token: no plain round is played to measure it. A plan at half that margin measures plain first."""
    curve = lambda n: 10.0 if n == 64 else 1.0  # T(1) = 1, T(64) = 10, in any unit
    assert play(FallbackGuard(verify_ms=curve), 12, 0.1, 40, plan_verified=64) == ["plan"] * 12
    assert play(FallbackGuard(verify_ms=curve), 12, 0.1, 12, plan_verified=64).count("plain") == PLAIN_PROBE  # 8.3 ms a token
    assert play(FallbackGuard(), 12, 0.1, 40, plan_verified=64).count("plain") == PLAIN_PROBE  # no curve, no estimate


def test_the_plain_cost_of_one_request_is_not_carried_into_the_next():
    """Plain decoding costs more after a long prompt (attention reads the whole cache): a plan that
    beat a 10 ms plain token there must still lose against a 5 ms one after a short prompt."""
    guard = FallbackGuard()
    long_prompt = play(guard, 20, plan_seconds=0.03, plan_tokens=4, plain_seconds=0.010)
    assert guard.switches == 0 and long_prompt.count("plain") == PLAIN_PROBE
    guard.start()
    short_prompt = play(guard, 20, plan_seconds=0.03, plan_tokens=4, plain_seconds=0.005)
    assert guard.switches == 1 and short_prompt[PROBE_ROUNDS + PLAIN_PROBE:] == ["plain"] * (20 - PROBE_ROUNDS - PLAIN_PROBE)


def test_disabled_always_plays_the_plan():
    guard = FallbackGuard(GuardSettings(enabled=False), plain_ms=1.0)
    assert set(play(guard, 30, plan_seconds=1.0, plan_tokens=1)) == {"plan"}


def plan_costs_more_per_round(played: str, seconds: float, tokens: int) -> float:
    """A round of the plan costs 1.5 plain tokens (its verify is wider), whatever it commits."""
    return 1.0 if played == "plain" else 1.5


@pytest.mark.parametrize("drafter_seed, falls_back", [(1, True), (0, False)])  # another model misses; the target itself hits
@pytest.mark.parametrize("gamma", [1, 4])
def test_the_engine_under_the_guard_is_token_identical_to_plain(drafter_seed, falls_back, gamma):
    target = tiny_llama("sdpa", seed=0)
    drafter = ModelDrafter("model", tiny_llama("sdpa", seed=drafter_seed), CPU)
    guard = FallbackGuard(plain_ms=1000.0, cost=plan_costs_more_per_round)  # 1 s a plain token, as the cost says
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=drafter, gamma=gamma, guard=guard)
    for _ in range(2):  # the second request measures plain decoding afresh
        result = engine.generate(PROMPT, 48, SamplingConfig())
        assert list(result.token_ids) == reference_greedy(target, PROMPT, 48)
        assert (result.plain_rounds > 0) == falls_back and (result.fallbacks > 0) == falls_back


def test_plain_decoding_carries_no_guard():
    engine = SpeculativeEngine(tiny_llama("sdpa", seed=0), CPU, eos_ids=set(), guard=FallbackGuard())
    assert engine.guard is None and engine.plain_stage is None


def test_a_lookup_chain_grows_while_copies_hold_and_the_output_stays_the_targets():
    """A tiny random model soon repeats itself, so an n-gram lookup's drafts are accepted whole:
    the chain doubles from the plan's gamma (2) and the rounds commit more than gamma + 1 tokens."""
    from specplan.runtime.drafters.ngram import NgramDrafter

    target = tiny_llama("sdpa", seed=0)
    guard = FallbackGuard(plain_ms=1000.0, cost=lambda played, seconds, tokens: 1.0 if played == "plain" else 0.5)
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=NgramDrafter(3), gamma=2, guard=guard)
    result = engine.generate(PROMPT, 96, SamplingConfig())
    assert list(result.token_ids) == reference_greedy(target, PROMPT, 96)
    assert max(result.committed_per_forward) > 3 and engine.growth is not None
    unguarded = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=NgramDrafter(3), gamma=2)
    assert max(unguarded.generate(PROMPT, 96, SamplingConfig()).committed_per_forward) <= 3
    fixed = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=NgramDrafter(3), gamma=2, guard=guard, fixed_chain=True)
    result = fixed.generate(PROMPT, 96, SamplingConfig())  # bench's plan-fixed-chain: under the guard, chains of 2
    assert fixed.growth is None and max(result.committed_per_forward) <= 3
    assert list(result.token_ids) == reference_greedy(target, PROMPT, 96)
