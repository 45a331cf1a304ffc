"""The prediction's lengths (planner/prediction.py): the solver's choice against brute force over the
replayed candidates (each round costed one by one with T(n)), the fixed rule under a plan's stages, and
the plan's section written by solve_plan only where the profile replayed a prediction."""

from __future__ import annotations

import math
import random
import warnings
from dataclasses import replace

import pytest

from specplan.core.plan import Stage, StageShape
from specplan.core.prediction import PredictionCalibration, PredictionCandidate, rule_lengths
from specplan.core.profile import DeviceInfo, ModelEntry, Profile, RetrievalEntry
from specplan.planner.options import runtime_options
from specplan.planner.prediction import costed_candidates, prediction_line, rule_for_stages, solve_prediction
from specplan.planner.solve import solve_plan
from specplan.profiler.prediction_acceptance import prediction_calibration, replay_prediction
from specplan.core.profile import LatencyCurve
from tests.planner.planner_instances import linear_curve


def profile_with(curve: LatencyCurve, calibration: PredictionCalibration | None) -> Profile:
    return Profile(DeviceInfo("cpu", "test", "cpu"), (ModelEntry("target", "t", "", role="target", latency=(curve,)),),
                   (), retrieval=(RetrievalEntry("ngram-12-12", "ngram:12:12", 0.01),),
                   calibration={"prompts": "test:calibration"}, prediction=calibration)


def random_calibration(rng: random.Random) -> PredictionCalibration:
    candidates = []
    for first in (1, 4, 16, 63):
        for min_match in (2, 4):
            lengths = rng.sample(range(0, 64), rng.randint(1, 6))
            candidates.append(PredictionCandidate(first, min_match,
                                                  tuple(sorted((d, rng.randint(1, 40)) for d in lengths)), 0))
    return PredictionCalibration(5, 600, rng.uniform(0.0, 0.5), tuple(candidates))


def brute_force(profile: Profile) -> tuple[float, int, int]:
    """(ms per token, first, min_match): every candidate's rounds laid out one by one, each costed as the
    runtime plays it: a draft call and a target forward of its draft plus the root."""
    curve = profile.target.latency[0]
    calibration = profile.prediction
    best = (math.inf, 0, 0)
    for candidate in calibration.candidates:
        rounds = [drafted for drafted, count in candidate.drafted for _ in range(count)]
        total = 0.0
        for drafted in rounds:
            total += calibration.ms_per_call + curve.ms[curve.n.index(drafted + 1)]
        ms = total / calibration.tokens
        if (ms, candidate.first, candidate.min_match) < best:
            best = (ms, candidate.first, candidate.min_match)
    return best


@pytest.mark.parametrize("seed", range(20))
def test_the_solver_chooses_the_candidate_brute_force_finds_cheapest(seed):
    rng = random.Random(seed)
    curve = linear_curve(rng.uniform(5, 50), rng.uniform(0.0, 3.0), max_n=64)
    profile = profile_with(curve, random_calibration(rng))
    lengths = solve_prediction(profile)
    ms, first, min_match = brute_force(profile)
    assert (lengths.first, lengths.min_match) == (first, min_match)
    assert lengths.ms_per_token == pytest.approx(ms)
    assert lengths.speedup == pytest.approx(curve.ms[0] / ms)


def test_on_replayed_outputs_the_choice_is_the_cheapest_replay():
    """End to end: outputs that copy the prediction in long spans with edits between; each candidate's replay
    costed round by round (brute force) against the solver's choice from the profile's counts, on a flat
    curve (long chains nearly free: a long first chain wins) and a steep one (a wrong token is dear)."""
    rng = random.Random(3)
    prediction = [rng.randrange(100, 400) for _ in range(300)]
    outputs = []
    for _ in range(6):
        output, position = [], rng.randrange(0, 50)
        while len(output) < 120 and position < len(prediction):
            span = rng.randint(3, 30)
            output += prediction[position:position + span] + [rng.randrange(5, 50)]
            position += span + rng.choice((0, 1, 2))
        outputs.append(output[:120])
    pairs = [([1, 2], output) for output in outputs]

    class Words:
        def __call__(self, text, add_special_tokens=True):
            return {"input_ids": [int(word) for word in text.split()]}

    text = " ".join(map(str, prediction))
    calibration = replace(prediction_calibration(pairs, [text] * len(pairs), Words(), 128), ms_per_call=0.0)
    chosen = {}
    for name, slope in (("flat", 0.01), ("steep", 2.0)):
        curve = linear_curve(10.0, slope, max_n=64)
        lengths = solve_prediction(profile_with(curve, calibration))
        costs = {}
        for candidate in calibration.candidates:
            total = 0.0
            for prompt_ids, output in pairs:
                rounds, _ = replay_prediction(prediction, prompt_ids, output, candidate.first, candidate.min_match, 128)
                total += sum(curve.ms[r.drafted] for r in rounds)  # T(drafted + 1): curve.n starts at 1
            costs[(candidate.first, candidate.min_match)] = total / calibration.tokens
        cheapest = min(costs.items(), key=lambda item: (item[1], item[0]))
        assert (lengths.first, lengths.min_match) == cheapest[0], name
        assert lengths.ms_per_token == pytest.approx(cheapest[1])
        chosen[name] = lengths.first
    assert chosen["flat"] > chosen["steep"]


def test_the_fixed_rule_under_a_plans_stages():
    lookup = (Stage("ngram-12-12", "target", StageShape("sequence", gamma=40)),)
    profile = profile_with(linear_curve(10.0, 0.1, max_n=64), None)
    assert rule_for_stages(profile, lookup) == (15, 12) == rule_lengths(12)
    assert rule_for_stages(profile, ()) == (15, 2)
    model = (Stage("draft", "target", StageShape("sequence", gamma=5)),)
    assert rule_for_stages(profile, model) == (15, 2)


def test_solve_plan_writes_the_section_only_where_the_profile_replayed_a_prediction():
    curve = linear_curve(10.0, 0.05, max_n=64)
    calibration = PredictionCalibration(3, 300, 0.01, (PredictionCandidate(15, 2, ((0, 50), (15, 20)), 250),
                                                       PredictionCandidate(63, 12, ((0, 90), (63, 4)), 200)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        without = solve_plan(profile_with(curve, None), runtime_options()).plan
        plan = solve_plan(profile_with(curve, calibration), runtime_options()).plan
    assert without.prediction is None and costed_candidates(profile_with(curve, None)) == []
    lengths = plan.prediction
    assert (lengths.first, lengths.min_match) == (15, 2)
    assert dict(lengths.calibrated_on) == {"prompts": "test:calibration", "count": 3, "tokens": 300}
    assert lengths.accepted_per_target_forward == pytest.approx(300 / 70)
    line = prediction_line(plan, profile_with(curve, calibration))
    assert "drafts 15 tokens" in line and "the fixed rule's lengths" in line


def test_a_replay_whose_chains_grew_by_the_older_rule_is_not_costed():
    """A profile replayed before chains grew by doubling their verify width (core/limits.py grown_chain)
    holds other rounds than the runtime now plays: the plan gets no prediction section, and `plan` says why."""
    from specplan.core.prediction import GROWTH, LEGACY_GROWTH, calibration_from_dict, calibration_to_dict

    curve = linear_curve(10.0, 0.05, max_n=64)
    current = PredictionCalibration(3, 300, 0.01, (PredictionCandidate(15, 2, ((0, 50), (15, 20)), 250),))
    raw = calibration_to_dict(current)
    assert raw["growth"] == GROWTH and calibration_from_dict(raw, ValueError) == current
    del raw["growth"]  # as profiles from before the key hold it
    legacy = calibration_from_dict(raw, ValueError)
    assert legacy.growth == LEGACY_GROWTH and costed_candidates(profile_with(curve, legacy)) == []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = solve_plan(profile_with(curve, legacy), runtime_options()).plan
    assert plan.prediction is None
    line = prediction_line(plan, profile_with(curve, legacy))
    assert "older rule (chain-doubles)" in line and "re-profile" in line and "15 tokens" in line
    with pytest.raises(ValueError, match="prediction.growth = 'sideways'"):
        calibration_from_dict({**raw, "growth": "sideways"}, ValueError)
