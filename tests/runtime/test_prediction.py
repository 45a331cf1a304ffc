"""Predicted Outputs as a draft source (runtime/drafters/prediction.py): the output is the target's
own whatever the prediction says (greedy: token-identical to a slow reference; sampling: the
target's distribution, chi-square), a prediction equal to the output is drafted whole, and after an
edit the prediction is found again where the output rejoins it."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from scipy import stats

from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.core.limits import grown_chain
from specplan.runtime.drafters.prediction import FIRST_CHAIN, PredictionDrafter
from specplan.runtime.engine import SpeculativeEngine
from tests.runtime.test_engine import CPU, PROMPTS, reference_greedy, second_token_distribution
from tests.runtime.tiny_models import tiny_llama

NEW = 24


def engine_with(target, prediction: list[int], prompt: list[int], fallback=None) -> SpeculativeEngine:
    drafter = PredictionDrafter(prediction, len(prompt), fallback, 3 if fallback is not None else 0)
    return SpeculativeEngine(target, CPU, set(), drafter, gamma=63)


def edits(reference: list[int]) -> dict[str, list[int]]:
    middle = len(reference) // 2
    return {"exact": reference, "substituted": reference[:middle] + [7] + reference[middle + 1:],
            "inserted": reference[:middle] + [7, 8, 9] + reference[middle:],
            "deleted": reference[:middle] + reference[middle + 4:], "unrelated": [3, 1, 4, 1, 5, 9, 2, 6] * 3,
            "empty": []}


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("fallback", [False, True])
def test_greedy_output_is_the_targets_whatever_the_prediction(prompt, fallback):
    target = tiny_llama("sdpa", seed=0)
    reference = reference_greedy(target, prompt, NEW)
    for name, prediction in edits(reference).items():
        engine = engine_with(target, prediction, prompt, NgramDrafter(3) if fallback else None)
        result = engine.generate(prompt, NEW, SamplingConfig())
        assert list(result.token_ids) == reference, name
        drafter = engine.drafter
        drafter.settle(prompt + list(result.token_ids))
        if name == "exact":  # every token but the first round's bonus came from the prediction
            assert drafter.accepted >= NEW - 2 and drafter.rejected == 0
            assert result.target_forwards <= 3
        if name == "unrelated":
            assert drafter.accepted <= 2


def test_after_an_edit_the_prediction_is_found_again_where_the_output_rejoins_it():
    prediction = [10, 11, 12, 13, 14, 15, 16, 17, 10, 11, 12, 13, 18, 19]  # "10 11 12 13" occurs twice
    drafter = PredictionDrafter(prediction, 1, None, 0, first=8)
    config = SamplingConfig()
    output = [0]
    assert drafter.propose(output, 8, config, None).tokens == tuple(range(10, 18))
    output += list(range(10, 18)) + [99]  # all eight accepted, then a token the prediction does not have
    assert drafter.propose(output, 8, config, None).tokens == () and drafter.position is None
    output += [11, 12, 13]  # the output rejoins "11 12 13": after where it was lost (index 9), not at index 1
    assert drafter.propose(output, 8, config, None).tokens == (18, 19)
    drafter.settle(output + [18, 19, 5])
    assert (drafter.accepted, drafter.rejected) == (10, 0)
    assert drafter.chain == grown_chain(grown_chain(8)) == 35  # two chains accepted whole: 8 -> 17 -> 35


def test_a_lost_prediction_needs_min_match_tokens_to_align_again():
    prediction = [10, 11, 12, 13, 14, 15, 16, 17]
    config = SamplingConfig()
    for min_match, aligned in [(2, True), (4, False), (3, True)]:
        drafter = PredictionDrafter(prediction, 1, None, 0, first=4, min_match=min_match)
        drafter.propose([0], 4, config, None)
        output = [0, 99, 12, 13, 14]  # lost at once; rejoins on the three tokens "12 13 14"
        assert (drafter.propose(output, 4, config, None).tokens == (15, 16, 17)) is aligned, min_match


def test_a_lookup_plan_sets_the_predictions_first_chain_and_match():
    from specplan.runtime.build import prediction_lengths

    target = tiny_llama("sdpa", seed=0)
    assert prediction_lengths(SpeculativeEngine(target, CPU, set(), NgramDrafter(12, 6), gamma=40)) == (FIRST_CHAIN, 6)
    assert prediction_lengths(SpeculativeEngine(target, CPU, set(), NgramDrafter(3), gamma=5)) == (FIRST_CHAIN, 2)
    assert prediction_lengths(SpeculativeEngine(target, CPU, set())) == (FIRST_CHAIN, 2)


def test_a_rejected_chain_counts_its_rest_and_starts_short_again():
    drafter = PredictionDrafter([10, 11, 12, 13, 14, 15], 1, None, 0, first=4)
    drafter.propose([0], 8, SamplingConfig(), None)
    drafter.settle([0, 10, 11, 7])
    assert (drafter.accepted, drafter.rejected, drafter.chain) == (2, 2, 4)


def test_a_long_prediction_grows_its_chain_to_the_longest_lookup():
    prediction = list(range(100, 300))
    drafter = PredictionDrafter(prediction, 1, None, 0)
    committed = [0]
    lengths = []
    for _ in range(4):
        draft = drafter.propose(committed, 63, SamplingConfig(), None).tokens
        lengths.append(len(draft))
        committed += list(draft) + [prediction[len(committed) - 1 + len(draft)]]
    assert lengths == [FIRST_CHAIN, 2 * FIRST_CHAIN + 1, 63, 63] == [15, 31, 63, 63]  # verifies of 16, 32, 64


def second_token_pvalue(draws: int) -> float:
    """Chi-square p-value of the 2nd token drawn with a prediction drafting against the target's own
    marginal; the prediction is the target's two likeliest tokens, so it is often accepted."""
    target = tiny_llama("sdpa", seed=0)
    prompt = [5, 9, 5, 9, 5, 9, 5]
    expected = second_token_distribution(target, prompt, 1.0)
    likeliest = reference_greedy(target, prompt, 2)
    counts = collections.Counter()
    for seed in range(draws):
        engine = engine_with(target, likeliest + [3, 4], prompt)
        counts[engine.generate(prompt, 2, SamplingConfig(1.0, 1.0, seed=seed)).token_ids[1]] += 1
    order = np.argsort(-expected)
    observed = np.array([counts.get(int(token), 0) for token in order], dtype=float)
    wanted = expected[order] * draws
    keep = np.cumsum(wanted) <= draws * 0.97  # pool the tail into one bin so every bin expects >= ~5
    observed = np.append(observed[keep], observed[~keep].sum())
    wanted = np.append(wanted[keep], wanted[~keep].sum())
    return stats.chisquare(observed, wanted * observed.sum() / wanted.sum()).pvalue


def test_sampled_output_has_the_target_distribution_with_a_prediction():
    assert second_token_pvalue(1500) > 1e-3


def test_an_unchecked_prediction_fails_the_same_test(monkeypatch):
    """The chi-square above can fail: a verifier that accepts every drafted token commits the prediction."""
    from specplan.runtime import stage
    from specplan.runtime.verify import VerifyResult

    def accept_all(tree, logits, sampling, generator):
        return VerifyResult(tuple(range(1, tree.num_nodes)), int(logits[-1].argmax())), None

    monkeypatch.setattr(stage, "_verify", accept_all)
    assert second_token_pvalue(300) < 1e-6


def test_the_plans_prediction_section_sets_the_lengths_over_the_rule():
    from dataclasses import replace

    from specplan.core.prediction import PredictionLengths
    from specplan.runtime.build import build_prediction_engine, prediction_lengths
    from tests.core.test_formats import make_plan

    target = tiny_llama("sdpa", seed=0)
    lookup = SpeculativeEngine(target, CPU, set(), NgramDrafter(12, 6), gamma=40)
    planned = replace(make_plan(), prediction=PredictionLengths(4, 3, 2.0, 500.0, 5.0, 3.0))
    assert prediction_lengths(lookup, planned) == (4, 3)
    assert prediction_lengths(lookup, make_plan()) == (15, 6)  # no section: the fixed rule
    assert prediction_lengths(SpeculativeEngine(target, CPU, set()), planned) == (4, 3)
    engine = build_prediction_engine(lookup, [10, 11, 12], 2, plan=planned)
    assert (engine.drafter.first, engine.drafter.min_match) == (4, 3)
    assert (build_prediction_engine(lookup, [10, 11, 12], 2).drafter.first) == 15
    assert build_prediction_engine(lookup, [10, 11, 12], 2, plan=planned, lengths=(7, 2)).drafter.min_match == 2


def test_serve_plays_the_fixed_rule_unless_told_to_play_the_planned_lengths():
    """serve's default is the rule, measured faster than the planned lengths on the pair's edits
    (docs/planner-math.md section 12.6); ``--prediction-lengths planned`` plays the plan's section."""
    from dataclasses import replace
    from types import SimpleNamespace

    from specplan.core.prediction import PredictionLengths
    from specplan.serve.server import prediction_phrase
    from specplan.serve.service import ServeSettings
    from tests.core.test_formats import make_plan

    target = tiny_llama("sdpa", seed=0)
    lookup = SpeculativeEngine(target, CPU, set(), NgramDrafter(12, 6), gamma=40)
    planned = replace(make_plan(), prediction=PredictionLengths(4, 3, 2.0, 500.0, 5.0, 3.0))
    runner = SimpleNamespace(engine=lookup, plain=lookup, plan=planned)
    phrase = lambda settings: prediction_phrase(SimpleNamespace(runner=runner, settings=settings))
    assert phrase(ServeSettings()) == "a prediction drafts 15 tokens after each alignment on 6 (the fixed rule)"
    assert phrase(ServeSettings(prediction_lengths="planned")) == "a prediction drafts 4 tokens after each alignment on 3 (planned)"
