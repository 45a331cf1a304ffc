"""Censored chain rounds: a long chain's rounds near an output's end are kept, and the product-limit
completion of the histogram recovers the true accepted-length distribution where dropping or
miscounting them does not."""

from __future__ import annotations

import random

import pytest

from specplan.profiler.acceptance import AcceptanceCounter, completed_histogram


def simulated_counter(rate: float, gamma: int, output: int, prompts: int, seed: int) -> tuple[AcceptanceCounter, list[int]]:
    """Rounds of a gamma-chain over outputs of ``output`` tokens, each draft token matched with
    probability ``rate``; rounds running past the end are censored. Also returns every round's true
    accepted length (what an endless output would have shown)."""
    generator = random.Random(seed)
    counter, truth = AcceptanceCounter(gamma, width=1), []
    for _ in range(prompts):
        start = 0
        while start < output:
            accepted = 0
            while accepted < gamma and generator.random() < rate:
                accepted += 1
            truth.append(accepted)
            seen = min(gamma, output - start)
            if accepted >= seen < gamma:
                counter.add_censored(seen, gamma)
                break
            counter.add_chain(accepted, drafted=gamma)
            start += accepted + 1
    return counter, truth


def survival(hist, k: int) -> float:
    return sum(hist[k:]) / sum(hist)


@pytest.mark.parametrize("rate", [0.8, 0.95])
def test_completed_histogram_recovers_the_true_survival_of_long_chains(rate):
    gamma, output = 48, 64
    counter, truth = simulated_counter(rate, gamma, output, prompts=3000, seed=1)
    true_hist = [truth.count(a) for a in range(gamma + 1)]
    completed = counter.accepted_hist
    assert sum(completed) == sum(counter.hist) + sum(counter.censored)
    for k in (4, 16, 32, gamma):
        assert survival(completed, k) == pytest.approx(survival(true_hist, k), rel=0.05, abs=0.002)
    # leaving censored rounds out, or counting them as accepted where the output ended, biases it low
    dropped = counter.hist
    miscounted = [count + censored for count, censored in zip(counter.hist, counter.censored)]
    for wrong in (dropped, miscounted):
        assert survival(wrong, 16) < 0.85 * survival(true_hist, 16)


def test_alpha_counts_a_censored_rounds_tokens_as_accepted():
    counter = AcceptanceCounter(8, width=1)
    counter.add_chain(2, drafted=8)        # 2 accepted, 1 rejection
    counter.add_censored(3, drafted=8)     # 3 accepted, no rejection seen
    assert counter.alpha == pytest.approx(5 / 6)
    assert counter.drafted_hist[8] == 2 and sum(counter.accepted_hist) == 2


def test_a_censored_round_must_match_fewer_tokens_than_it_drafted():
    counter = AcceptanceCounter(8, width=1)
    with pytest.raises(ValueError, match="censored"):
        counter.add_censored(5, drafted=5)


def test_completion_without_censored_rounds_is_the_histogram():
    assert completed_histogram([3, 0, 2], [0, 0, 0]) == [3, 0, 2]
