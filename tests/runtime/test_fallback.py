"""The fallback guard (runtime/fallback.py, docs/planner-math.md section 12.5): the rule on given
costs, and an engine under it that stays token-identical to plain greedy decoding whether its
drafter always misses (the guard falls back) or always hits (the guard keeps the plan)."""

from __future__ import annotations

import pytest
import torch

from specplan.runtime.drafters.base import Drafter, Proposal, SamplingConfig
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


def lookup_round(guard: FallbackGuard, drafted: int, accepted: int, verify_seconds: float, other_seconds: float = 0.0):
    """One plan round of a lookup that drafted ``drafted`` tokens and had ``accepted`` of them accepted."""
    guard.record("plan", other_seconds + verify_seconds, accepted + 1, drafted + 1, verify_seconds)


LINEAR = lambda n: float(n)  # T(n) = n ms: a verify costs its width
# a fixed cost a verify pays whatever its width, then no width past 6 pays: the first chain is 5 (a verify of 6,
# T(6) / 6 = 2.67 ms a token; 5 cost 3.0, 12% more)
FIXED_THEN_STEEP = lambda n: 10.0 + n if n <= 6 else 100.0 * n


def test_the_window_re_costed_at_a_shorter_chain_cuts_each_draft_and_splits_each_long_copy():
    """Worked by hand: T(n) = n. A 15-token draft rejected at once (16 ms, 1 token) cut at 3 verifies 4
    tokens: 4 ms. A 15-token copy accepted whole (16 ms, 16 tokens) at 3 takes ceil(16 / 4) = 4 rounds
    of 4 ms. A round that drafted 2 is below the cut: unchanged. Non-verify seconds (1 ms) are kept."""
    guard = FallbackGuard(verify_ms=LINEAR)
    guard.start(chain=15)
    lookup_round(guard, 15, 0, 0.016, 0.001)
    lookup_round(guard, 15, 15, 0.016, 0.001)
    lookup_round(guard, 2, 1, 0.003, 0.001)
    assert guard.chain_ms(15) == pytest.approx(1000 * (0.017 + 0.017 + 0.004) / 19)
    assert guard.chain_ms(3) == pytest.approx(1000 * (0.005 + 4 * 0.005 + 0.004) / 19)


def test_a_lookup_chain_that_loses_on_false_matches_is_shortened_before_plain_decoding_plays():
    """Four 15-token drafts rejected at once (16 ms each, one token) against 10 ms plain tokens: the
    plan loses, but chains of 1 would have cost 2 ms a token: the guard shortens the chain (the
    cheapest halving) and plays no plain round for it. Without a curve, or with the setting off, it
    backs off to plain decoding as before."""
    guard = FallbackGuard(plain_ms=10.0, verify_ms=LINEAR)
    guard.start(chain=15)
    for _ in range(PROBE_ROUNDS):
        lookup_round(guard, 15, 0, 0.016)
    assert guard.choose() == "plan" and guard.cap == 1 and guard.shortenings == 1 and guard.switches == 0
    for settings, curve in ((GuardSettings(), None), (GuardSettings(shorter_chains=False), LINEAR)):
        other = FallbackGuard(settings, plain_ms=10.0, verify_ms=curve)
        other.start(chain=15)
        for _ in range(PROBE_ROUNDS):
            lookup_round(other, 15, 0, 0.016)
        assert other.choose() == "plain" and other.cap is None and other.switches == 1


def test_a_shorter_chain_that_still_loses_backs_off_to_plain_decoding():
    """Rounds whose cost is not their verify (16 ms of drafting a round) lose at every chain length."""
    guard = FallbackGuard(plain_ms=10.0, verify_ms=LINEAR)
    guard.start(chain=15)
    for _ in range(PROBE_ROUNDS):
        lookup_round(guard, 15, 0, 0.001, other_seconds=0.015)
    assert guard.choose() == "plain" and guard.cap == 15 and guard.switches == 1
    guard.start()  # an engine without a lookup chain: nothing to shorten
    assert guard.cap is None


def test_a_shortened_chain_doubles_back_to_the_plans_gamma_after_whole_accepts():
    from specplan.runtime.fallback import ChainGrowth

    flat = ChainGrowth(16, verify_ms=lambda n: 5.0 + 4.0 * n, first=16)  # too flat to grow past the plan's 16
    assert not flat.can_grow
    flat.shorten(2)
    assert (flat.gamma, flat.floor) == (2, 2)
    for drafted in (2, 4, 8, 16):
        flat.record(drafted=drafted, committed=drafted + 1)
    assert flat.gamma == 16  # back to the plan's gamma, not beyond
    flat.record(drafted=16, committed=3)
    assert flat.gamma == 2  # a rejection returns to the shorter chain
    flat.start()
    assert (flat.gamma, flat.floor) == (16, 16)  # the next request starts at the plan's


EPYC_PAIR = lambda n: 26.6 if n == 1 else 147.8 if n == 16 else 333.5 if n == 64 else 26.6 + 12.0 * (n - 1)


def test_a_fresh_match_drafts_the_first_chain_and_a_copy_goes_on_at_the_plans_gamma():
    """On a curve shaped like the pair's (T(16) 5.6 T(1), cheaper per token than any shorter chain) a fresh
    match drafts 15 tokens; a first chain accepted whole is a copy, drafted on at 63; a rejection starts the next match at 15
    again, a round without a match changes nothing, and a guard's shorter chain below 15 wins."""
    from specplan.runtime.fallback import ChainGrowth, first_chain

    assert first_chain(63, EPYC_PAIR) == 15
    assert first_chain(7, EPYC_PAIR) == 4  # on its straight part 5 tokens verify within 10% of 8's cost a token
    growth = ChainGrowth(63, verify_ms=EPYC_PAIR)
    assert (growth.first, growth.gamma) == (15, 15)
    growth.record(drafted=0, committed=1)
    assert growth.gamma == 15
    growth.record(drafted=15, committed=16)
    assert growth.gamma == 63
    growth.record(drafted=63, committed=64)
    assert growth.gamma == 63
    growth.record(drafted=63, committed=4)
    assert growth.gamma == 15
    growth.shorten(4)
    growth.record(drafted=4, committed=2)
    assert growth.gamma == 4
    growth.start()
    assert (growth.gamma, growth.floor) == (15, 63)
    assert ChainGrowth(63).gamma == 63 and ChainGrowth(63, verify_ms=EPYC_PAIR, first=63).gamma == 63


def test_an_engine_drafts_a_fresh_matchs_first_chain_then_the_copy_and_stays_the_targets():
    """A tiny random model soon repeats itself: the first round that drafts verifies the first chain
    (FIXED_THEN_STEEP: 5), and a whole accept lets the next round draft the plan's 12."""
    from specplan.runtime.drafters.ngram import NgramDrafter

    target = tiny_llama("sdpa", seed=0)
    guard = FallbackGuard(plain_ms=1000.0, cost=lambda played, seconds, tokens: 1.0 if played == "plain" else 0.5)
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=NgramDrafter(3), gamma=12, guard=guard,
                               verify_ms=FIXED_THEN_STEEP)
    result = engine.generate(PROMPT, 96, SamplingConfig())
    assert list(result.token_ids) == reference_greedy(target, PROMPT, 96)
    committed = result.committed_per_forward
    assert engine.growth.first == 5 and max(committed) > 6
    longer = next(index for index, count in enumerate(committed) if count > 6)
    assert committed[longer - 1] == 6  # a longer chain only after a first chain of 5 accepted whole


class WrongLookup(Drafter):
    """A lookup that always has a match and is always wrong: ``gamma`` copies of a token the tiny
    target never emits after these prompts (it runs no model, so its chain may be shortened)."""

    name = "wrong-lookup"

    def reset(self) -> None:
        pass

    def propose(self, committed, gamma, sampling, generator) -> Proposal:
        return Proposal((3,) * gamma)


def test_an_engine_whose_guard_shortens_its_lookup_chain_stays_the_targets():
    """Chains of 8 that are always rejected, a plan round costing its verify width (T(n) = n) against
    3 for a plain token: the guard shortens the chain to 1 (2 a round, against 9 at 8) and plays it,
    no plain round; the output is the target's greedy decoding."""
    target = tiny_llama("sdpa", seed=0)
    assert 3 not in reference_greedy(target, PROMPT, 96)
    guard = FallbackGuard(plain_ms=3000.0, verify_ms=LINEAR,
                          cost=lambda played, seconds, tokens: 3.0 if played == "plain" else float(engine.stage.gamma + 1))
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=WrongLookup(), gamma=8, guard=guard,
                               verify_ms=FIXED_THEN_STEEP)
    result = engine.generate(PROMPT, 96, SamplingConfig())
    assert list(result.token_ids) == reference_greedy(target, PROMPT, 96)
    assert guard.shortenings == 1 and engine.growth.floor == 1 and result.fallbacks == 0
    assert max(result.committed_per_forward) == 1 and result.plain_rounds == 0


def test_rounds_that_drafted_nothing_measure_plain_decoding_and_never_count_against_the_plan():
    """A lookup without a match verifies its root alone: a one-token decode, whatever its (noisy) cost.
    Such rounds join the plain cost, so no plain probe plays, and a first round slower than the rest
    (38 ms against 28, as measured after a prefill) does not send the plan off for 16 plain tokens
    before its first copy."""
    guard = FallbackGuard(verify_ms=LINEAR)
    guard.start(chain=63)
    for seconds in (0.038, 0.028, 0.028, 0.028, 0.029, 0.028):
        assert guard.choose() == "plan"
        guard.record("plan", seconds, 1, 1, seconds)
    assert guard.plain_ms == pytest.approx(28.0) and len(guard.window) == 0 and guard.plain_rounds == 0
    for _ in range(PROBE_ROUNDS):
        lookup_round(guard, 63, 63, 0.340)  # copies: 64 tokens for 340 ms
    assert guard.choose() == "plan" and guard.plain_rounds == 0 and guard.switches == 0


def test_counting_empty_rounds_judges_one_dear_draft_after_rounds_without_a_match():
    """Three rounds without a match, then one 63-token verify that commits a token (340 ms against 28):
    counted towards the first judgement, the guard judges at once (no shorter chain beats a plain token:
    at 1 it would still have cost 32 ms for one, so plain decoding plays); by default it waits for four
    drafting rounds."""
    curve = lambda n: 27.0 + 5.0 * (n - 1)  # T(64) 12 T(1), as the pair on the home EPYC
    for count, judged in ((True, True), (False, False)):
        guard = FallbackGuard(GuardSettings(count_empty_rounds=count), verify_ms=curve)
        guard.start(chain=63)
        for _ in range(3):
            guard.record("plan", 0.028, 1, 1, 0.028)
        lookup_round(guard, 63, 0, 0.340)
        assert guard.switches == (1 if judged else 0) and guard.shortenings == 0
        assert guard.choose() == ("plain" if judged else "plan") and len(guard.window) == (0 if judged else 1)
