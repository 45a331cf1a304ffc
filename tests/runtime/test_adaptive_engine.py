"""Adaptive plans on tiny random Llamas: switching configurations between rounds never changes
the output (greedy token-identical, sampling distributed as the target's, checked by a test that
a broken verifier fails), the live scores equal the profiler's replay, and the re-planner's
choice follows the request's acceptance."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from specplan.core.plan import Plan, Prediction, Stage, StageShape
from specplan.core.plan_adaptive import AdaptiveCandidate, AdaptiveSettings
from specplan.core.profile import AcceptanceEntry
from specplan.profiler.acceptance import AcceptanceCounter
from specplan.profiler.acceptance import teacher_forced_logits
from specplan.profiler.retrieval_acceptance import replay_retrieval
from specplan.runtime import stage as stage_module
from specplan.runtime.adaptive_build import build_adaptive_engine
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.cacheback import CacheDrafter
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.drafters.ngram_tree import NgramTreeDrafter
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.runtime.verify import VerifyResult
from tests.runtime.test_engine import PROMPTS, reference_greedy
from tests.runtime.test_tree_engine import PROMPT, chi_square_pvalue, third_token_distribution, tiny_loaded, tiny_profile
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")
pytestmark = pytest.mark.usefixtures("one_thread")


def _entry(drafter: str, alpha: float) -> AcceptanceEntry:
    return AcceptanceEntry(drafter, "target", 0.0, alpha, 8, (), (alpha, 0.1, 0.05), (), 100)


def adaptive_profile():
    acceptance = tuple(_entry(d, a) for d, a in [("ngram-3", 0.3), ("recycle", 0.5), ("cache", 0.2), ("layerskip-1", 0.4)])
    return replace(tiny_profile(), acceptance=acceptance)


def _sequence(drafter: str, gamma: int) -> tuple[Stage, ...]:
    return (Stage(drafter, "target", StageShape("sequence", gamma=gamma)),)


CANDIDATES = (
    AdaptiveCandidate(_sequence("recycle", 2), 1.0),
    AdaptiveCandidate((Stage("ngram-3", "target", StageShape("tree", depth=2, parents=(-1, 0, 0, 1))),), 1.0),
    AdaptiveCandidate(_sequence("layerskip-1", 3), 1.0),
    AdaptiveCandidate((Stage("cache", "target", StageShape("tree", budget=6, depth=3, dynamic=True)),), 1.0),
    AdaptiveCandidate((), 1.0),
    AdaptiveCandidate((Stage("recycle", "layerskip-1", StageShape("tree", budget=4, depth=2, dynamic=True)),
                       Stage("layerskip-1", "target", StageShape("sequence", gamma=2))), 1.0),
    AdaptiveCandidate((Stage("layerskip-1", "target", StageShape("tree", budget=6, depth=3, dynamic=True,
                                                                 graft="recycle", graft_budget=2)),), 1.0),
)


def adaptive_plan(candidates=CANDIDATES, every: int = 2) -> Plan:
    return Plan("profile.yaml", "", {"kind": "cpu", "sku": "cpu"}, "target", 0.0, candidates[0].stages,
                Prediction(1.0, 1.0, 1.0, 1.0), adaptive=AdaptiveSettings(candidates, every=every))


def cycling(count: int):
    """Force a switch after every round: round k is played by candidate k mod count."""
    return lambda rounds, committed: rounds % count


def engine_for(target, policy=None, plan=None):
    return build_adaptive_engine(plan or adaptive_plan(), adaptive_profile(), tiny_loaded(target), CPU, policy=policy)


def until_eos(tokens: list[int], eos: set[int]) -> list[int]:
    for index, token in enumerate(tokens):
        if token in eos:
            return tokens[: index + 1]
    return tokens


def test_forced_switches_keep_greedy_output_token_identical():
    target = tiny_llama("sdpa", seed=0)
    engine = engine_for(target, cycling(len(CANDIDATES)))
    switches = 0
    for prompt in PROMPTS + [[7, 8, 9, 7, 8, 9, 7, 8], [40, 41, 42, 43, 40, 41]]:
        result = engine.generate(prompt, 28, SamplingConfig())
        assert list(result.token_ids) == until_eos(reference_greedy(target, prompt, 28), engine.eos_ids)
        assert sum(use.rounds for use in result.configurations) == result.target_forwards
        assert sum(use.tokens for use in result.configurations) == len(result.token_ids)
        switches += result.switches
        if len(result.token_ids) == 28:
            assert result.switches == result.target_forwards - 1  # every round boundary switched
            assert len(result.configurations) == min(len(CANDIDATES), result.target_forwards)
    assert switches >= 2 * len(CANDIDATES)


def test_the_re_planner_runs_losslessly_and_reports_its_rounds():
    target = tiny_llama("sdpa", seed=0)
    engine = engine_for(target, plan=adaptive_plan(every=1))
    engine.eos_ids = set()
    for prompt in PROMPTS:
        result = engine.generate(prompt, 24, SamplingConfig())
        assert list(result.token_ids) == reference_greedy(target, prompt, 24)
        assert result.replans == result.target_forwards - 1  # every=1: between every two rounds
        assert 0 < result.adaptive_seconds < result.seconds
        assert 0 <= result.reading_seconds <= result.adaptive_seconds


class _Swap:
    """Install ``verify_sampling`` replacements in the stage module for one test."""

    def __init__(self, monkeypatch, broken: bool):
        if broken:
            monkeypatch.setattr(stage_module, "verify_sampling", accept_every_sampled_draft)


def accept_every_sampled_draft(tree, target_probs, generator):
    """A broken verifier: accepts a sampled chain without the rejection test (the draft's
    distribution leaks into the output), then samples the bonus from the target."""
    path = [0]
    while True:
        children = [node for node in range(len(tree.parents)) if tree.parents[node] == path[-1]]
        if not children:
            break
        path.append(children[0])
    bonus = int(torch.multinomial(target_probs[path[-1]], 1, generator=generator))
    return VerifyResult(tuple(path[1:]), bonus)


def third_tokens_switching(engine, draws: int) -> list[int]:
    return [engine.generate(PROMPT, 3, SamplingConfig(1.0, 1.0, seed=seed)).token_ids[2] for seed in range(draws)]


@pytest.mark.parametrize("broken", [False, True], ids=["verifier", "broken-verifier"])
def test_sampled_output_with_forced_switches_has_the_target_distribution(monkeypatch, broken):
    """Chi-square on the 3rd token: rounds alternate between a sampled model chain, a sampled
    hierarchy and retrieval trees; a verifier that skips the rejection test fails the same test."""
    target = tiny_llama("sdpa", seed=0)
    candidates = (CANDIDATES[2], CANDIDATES[5], CANDIDATES[3], CANDIDATES[1])
    engine = engine_for(target, cycling(len(candidates)), adaptive_plan(candidates))
    engine.eos_ids = set()
    _Swap(monkeypatch, broken)
    pvalue = chi_square_pvalue(third_tokens_switching(engine, 1500), third_token_distribution(target, PROMPT))
    assert (pvalue < 1e-3) if broken else (pvalue > 1e-3)


@pytest.mark.parametrize("name", ["ngram-3", "recycle", "cache"])
def test_live_scores_equal_the_profilers_replay_of_the_same_output(name):
    """The online replay over the committed tokens counts what the profiler's offline replay counts."""
    target = tiny_llama("sdpa", seed=0)
    engine = engine_for(target, cycling(len(CANDIDATES)))
    engine.eos_ids = set()
    prompt = [7, 8, 9, 7, 8, 9, 7, 8, 3, 4]
    result = engine.generate(prompt, 40, SamplingConfig())
    engine.read()  # the engine scores between rounds: add the last one
    engine.live.commit(prompt + list(result.token_ids))
    live = engine.live.scores[name].counts()
    counter = AcceptanceCounter(8, 8)
    tree = {"ngram-3": NgramTreeDrafter(3), "recycle": RecycleDrafter(), "cache": CacheDrafter()}[name]
    sequence = NgramDrafter(3) if name == "ngram-3" else tree

    def chain(committed, gamma):
        return sequence.propose(committed, gamma, SamplingConfig(), torch.Generator()).tokens

    logits = teacher_forced_logits(target, prompt + list(result.token_ids), CPU) if tree.learns_from_verifier else None
    replay_retrieval(counter, tree, chain, prompt, list(result.token_ids), target_logits=logits)
    assert live.accepted_hist == tuple(counter.hist)
    assert live.rank_hits == tuple(counter.rank_hits)
    assert live.positions == counter.positions
    assert live.positions > 0


def test_a_model_drafters_own_rounds_update_its_posterior():
    target = tiny_llama("sdpa", seed=0)
    plan = adaptive_plan((CANDIDATES[2], CANDIDATES[4]), every=1000)
    engine = engine_for(target, lambda rounds, committed: 0, plan)  # stay on the model chain
    engine.eos_ids = set()
    result = engine.generate(PROMPTS[0], 24, SamplingConfig())
    counts = engine.live.counts("layerskip-1")
    assert result.target_forwards - 1 <= counts.rounds <= result.target_forwards  # a last round may draft nothing
    assert sum(counts.censored) > 0 and sum(counts.accepted_hist) > 0
    accepted = sum(a * n for a, n in enumerate(counts.accepted_hist)) + sum(g * n for g, n in enumerate(counts.censored))
    assert accepted == len(result.token_ids) - result.target_forwards


def test_the_re_planner_moves_to_the_drafter_the_request_favours():
    """A prompt that repeats itself: prompt lookup accepts long chains; after the first re-plan the
    engine leaves plain decoding for the n-gram candidate and stays lossless."""
    target = tiny_llama("sdpa", seed=0)
    candidates = (AdaptiveCandidate((), 1.0), AdaptiveCandidate(_sequence("ngram-3", 4), 1.0))
    plan = adaptive_plan(candidates, every=2)
    profile = replace(adaptive_profile(), acceptance=(_entry("ngram-3", 0.05),))
    engine = build_adaptive_engine(plan, profile, tiny_loaded(target), CPU)
    engine.eos_ids = set()
    greedy = reference_greedy(target, PROMPTS[0], 30)
    prompt = PROMPTS[0] + greedy  # the continuation is in the prompt: n-gram lookup finds it
    result = engine.generate(prompt, 30, SamplingConfig())
    assert list(result.token_ids) == reference_greedy(target, prompt, 30)
    used = {use.summary: use.rounds for use in result.configurations}
    assert result.switches >= 1 and any(summary.startswith("ngram-3") for summary in used)


def test_bench_rows_report_which_configurations_ran():
    from specplan.bench.methods import EngineMethod
    from specplan.bench.metrics import Row

    target = tiny_llama("sdpa", seed=0)
    engine = engine_for(target, cycling(3))
    engine.eos_ids = set()
    measurement = EngineMethod("plan", "plan", engine, SamplingConfig(), "adaptive").run(PROMPTS[0], 12)
    record = Row("p", "c", "plan", measurement, None, 1.0).to_dict()
    assert [use["configuration"] for use in record["configurations"]][:2] == [
        "recycle -> target (sequence gamma 2)", "ngram-3 -> target (tree 4 nodes depth 2)"]
    assert sum(use["rounds"] for use in record["configurations"]) == measurement.target_forwards


@pytest.mark.parametrize("score_every", [1, 3])
def test_reading_forwards_in_batches_changes_no_score_and_no_table(monkeypatch, score_every):
    """Forwards read every round or several at once: the same live counts and the same Token
    Recycling table for a candidate that is not playing."""
    from specplan.runtime import adaptive as adaptive_module

    def run(every_rounds):
        monkeypatch.setattr(adaptive_module, "SCORE_EVERY", every_rounds)
        candidates = (CANDIDATES[1], CANDIDATES[0])  # plays the n-gram tree; recycle learns aside
        plan = adaptive_plan(candidates, every=1000)
        plan = replace(plan, adaptive=replace(plan.adaptive, threshold=1.0))  # no re-plan: one configuration
        engine = build_adaptive_engine(plan, adaptive_profile(), tiny_loaded(tiny_llama("sdpa", seed=0)), CPU)
        engine.eos_ids = set()
        result = engine.generate(PROMPTS[0], 30, SamplingConfig())
        assert result.replans == 0 and result.target_forwards > 8
        engine.read()
        engine.live.commit(PROMPTS[0] + list(result.token_ids))
        counts = {name: engine.live.counts(name) for name in engine.live.scores}
        return result.token_ids, counts, dict(engine.families[1].drafter.table.rows)

    tokens, counts, table = run(score_every)
    assert run(1000) == (tokens, counts, table)  # read only at the end
    assert len(table) > len(PROMPTS[0]) // 2
