"""Chains costed over a finite answer (planner/horizon.py, docs/planner-math.md section 1, "A finite answer").

The recursion is held against a brute-force simulation of the runtime's rounds (a round with ``r``
tokens left drafts at most ``r - 1``), against the steady state it must approach, and through
`specplan plan --horizon` on a stored profile whose plan copies in chains of 63.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from specplan.cli.main import main
from specplan.core.profile import AcceptanceEntry
from specplan.planner import PlanOptions, solve_plan
from specplan.planner.horizon import horizon_chain
from specplan.planner.options import runtime_options
from specplan.planner.sequence import expected_accepted, expected_verify_ms
from specplan.core.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]
EDIT_PROFILE = ROOT / "profiles" / "cpu-qwen-llamacpp-edit-long" / "profile.yaml"
G = 12


def latency(n: int) -> float:
    """A verify curve as steep as llama.cpp's on this CPU: T(2) well above T(1), then flatter."""
    return 30.0 + 12.0 * math.sqrt(n - 1)


def lookup_rounds(rng: np.random.Generator, count: int) -> list[tuple[int, int]]:
    """(drafted, accepted) rounds of a G-chain lookup: often nothing, else a continuation partly accepted."""
    rounds = []
    for _ in range(count):
        if rng.random() < 0.5:
            rounds.append((0, 0))
            continue
        drafted = int(rng.integers(1, G + 1))
        rounds.append((drafted, int(min(drafted, rng.geometric(0.15) - 1))))
    return rounds


def entry_of(rounds: list[tuple[int, int]]) -> AcceptanceEntry:
    accepted, drafted = [0] * (G + 1), [0] * (G + 1)
    for d, a in rounds:
        drafted[d] += 1
        accepted[a] += 1
    return AcceptanceEntry("ngram-5", "target", 0.0, 0.5, G, tuple(accepted), drafted_hist=tuple(drafted))


def simulate(rounds: list[tuple[int, int]], gamma: int, horizon: int, answers: int, rng: np.random.Generator):
    """Mean rounds, verify ms and draft tokens per answer, playing the runtime's capped rounds."""
    total_rounds = total_verify = total_drafted = 0.0
    for _ in range(answers):
        left = horizon
        while left > 0:
            drafted, accepted = rounds[rng.integers(len(rounds))]
            cap = min(gamma, left - 1)
            total_rounds += 1
            total_verify += latency(min(drafted, cap) + 1)
            total_drafted += cap
            left -= min(accepted, cap) + 1
    return total_rounds / answers, total_verify / answers, total_drafted / answers


@pytest.mark.parametrize("gamma, horizon", [(12, 20), (8, 37), (3, 64)])
def test_the_recursion_matches_the_runtimes_capped_rounds(gamma, horizon):
    rng = np.random.default_rng(7)
    rounds = lookup_rounds(rng, 400)
    chain = horizon_chain(entry_of(rounds), gamma, horizon, latency)
    mean_rounds, mean_verify, mean_drafted = simulate(rounds, gamma, horizon, 20000, rng)
    assert chain.rounds == pytest.approx(mean_rounds, rel=0.01)
    assert chain.rounds * chain.verify_ms == pytest.approx(mean_verify, rel=0.01)
    assert chain.rounds * chain.drafted == pytest.approx(mean_drafted, rel=0.01)
    assert chain.rounds * chain.accepted == pytest.approx(horizon)


def test_the_last_round_verifies_only_what_is_left():
    """Every round copies a whole chain: 13 tokens, then a chain of 6 for the last 7 of 20. The steady
    state (every round verifies 13 and commits 13) would be wrong on both counts."""
    chain = horizon_chain(entry_of([(G, G)] * 10), G, 20, latency)
    assert chain.rounds == 2 and chain.accepted == 10
    assert chain.verify_ms == pytest.approx((latency(13) + latency(7)) / 2)
    assert chain.drafted == (G + 6) / 2


def test_a_long_answer_tends_to_the_steady_state():
    entry = entry_of(lookup_rounds(np.random.default_rng(11), 400))
    for gamma in (1, 6, G):
        chain = horizon_chain(entry, gamma, 4000, latency)
        assert chain.accepted == pytest.approx(expected_accepted(entry, gamma), rel=0.005)
        assert chain.verify_ms == pytest.approx(expected_verify_ms(entry, gamma, latency), rel=0.005)


def test_one_token_left_is_plain_decoding():
    chain = horizon_chain(entry_of([(G, G)]), G, 1, latency)
    assert (chain.rounds, chain.accepted, chain.verify_ms, chain.drafted) == (1.0, 1.0, latency(1), 0.0)


def test_a_model_drafter_without_a_histogram_uses_alpha():
    entry = AcceptanceEntry("draft", "target", 0.0, 0.6, 8)
    chain = horizon_chain(entry, 4, 3000, latency)
    assert chain.accepted == pytest.approx((1 - 0.6 ** 5) / 0.4, rel=0.005)
    assert chain.verify_ms == pytest.approx(latency(5), rel=0.005)  # every round but the last few drafts 4


def test_a_finite_answer_lowers_a_long_chain_plan_and_the_lp_still_agrees():
    profile = load_profile(EDIT_PROFILE)
    steady = solve_plan(profile, runtime_options())
    finite = solve_plan(profile, runtime_options(horizon=128))
    assert finite.plan.solver["horizon"] == 128 and "horizon" not in steady.plan.solver
    assert finite.plan.solver["lp_agrees"]
    assert finite.plan.predicted.accepted_per_target_forward < 0.9 * steady.plan.predicted.accepted_per_target_forward
    assert finite.plan.predicted.tokens_per_s < steady.plan.predicted.tokens_per_s
    plain = next(row for row in finite.candidates if not row.stages)
    assert plain.ms_per_token == pytest.approx(next(row for row in steady.candidates if not row.stages).ms_per_token)


def test_horizon_out_of_range_is_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["plan", str(EDIT_PROFILE), "--horizon", "5000"])
    assert stop.value.code == 2
    assert "--horizon: 5000 is out of range" in capsys.readouterr().err
    with pytest.raises(Exception, match="horizon 0 is out of range"):
        PlanOptions(horizon=0)



def test_a_horizon_plan_passes_its_recheck_and_an_edited_one_does_not():
    """`run` and `bench` re-cost a plan read from disk; one solved with --horizon is re-costed over the
    same answer (a steady-state re-check would refuse it as edited)."""
    from dataclasses import replace

    from specplan.core.errors import PlanError
    from specplan.core.plan import StageShape
    from specplan.planner.recheck import check_prediction

    profile = load_profile(EDIT_PROFILE)
    plan = solve_plan(profile, runtime_options(horizon=128)).plan
    check_prediction(plan, profile)
    with pytest.raises(PlanError, match="was it edited"):
        check_prediction(replace(plan, solver={**plan.solver, "horizon": 8}), profile)
    stage = plan.stages[0]
    edited = replace(plan, stages=(replace(stage, shape=StageShape("sequence", gamma=4)),))
    with pytest.raises(PlanError, match="was it edited"):
        check_prediction(edited, profile)
