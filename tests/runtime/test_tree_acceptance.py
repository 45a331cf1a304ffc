"""Profiler statistics for tree planning: retrieval rank acceptance alone and beside a model."""

from __future__ import annotations

import pytest
import torch

from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.prompts import spec_bench_split, stratified
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.cacheback import CacheDrafter
from specplan.runtime.drafters.ngram_tree import NgramTreeDrafter
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.profiler.acceptance import AcceptanceCounter, tree_round_positions
from specplan.profiler.retrieval_acceptance import replay_retrieval

PROMPT = [1, 2, 3, 10, 11, 1, 2, 3, 20, 21, 7, 1, 2]
OUTPUT = [3, 10, 11, 1, 2, 3, 20, 5, 1, 2, 3, 20]


pytestmark = pytest.mark.usefixtures("one_thread")


def no_chain(committed, gamma):
    return ()


def fresh_candidates(make, committed: list[int], width: int, logits=None) -> list[int]:
    """Slow reference: a new drafter that sees everything at once."""
    drafter = make()
    if logits is not None and hasattr(drafter, "observe"):
        drafter.observe(committed[:-1], logits[: len(committed) - 1])
    drafter.prepare(committed)
    return list(drafter.successors(committed[-drafter.context_tokens:], width).tokens)


@pytest.mark.parametrize("make", [lambda: NgramTreeDrafter(3), lambda: CacheDrafter(3), lambda: RecycleDrafter(4)],
                         ids=["ngram", "cache", "recycle"])
def test_incremental_replay_ranks_equal_a_fresh_drafter_per_position(make):
    logits = torch.randn(len(PROMPT) + len(OUTPUT), 32, generator=torch.Generator().manual_seed(0))  # [len, vocab]
    logits[torch.arange(len(PROMPT) + len(OUTPUT) - 1), torch.tensor(PROMPT + OUTPUT)[1:]] += 4.0  # mostly right
    counter = AcceptanceCounter(gamma=2, width=4)
    replay_retrieval(counter, make(), no_chain, PROMPT, OUTPUT, target_logits=logits)
    ranks = []
    for position, truth in enumerate(OUTPUT):
        candidates = fresh_candidates(make, PROMPT + OUTPUT[:position], 4, logits)
        ranks.append(candidates.index(truth) if truth in candidates else -1)
    reached = tree_round_positions(len(OUTPUT), 2, lambda position, start: ranks[position] >= 0)  # tree rounds
    hits = [sum(1 for position in reached if ranks[position] == rank) for rank in range(4)]
    assert counter.rank_hits == hits and counter.positions == len(reached) < len(OUTPUT)
    assert sum(hits) > 0


def test_graft_ranks_count_only_candidates_beside_the_models_children():
    counter, graft = AcceptanceCounter(gamma=2, width=4), AcceptanceCounter(gamma=2, width=4)
    model_top = torch.full((len(OUTPUT), 2), 99)  # [output, B]: the model never has the token ...
    model_top[0] = torch.tensor([3, 99])  # ... except at position 0 (the retrieval's rank 0 there)
    model_top[6] = torch.tensor([10, 98])  # at position 6 it holds the retrieval's rank-0 candidate
    assert fresh_candidates(lambda: NgramTreeDrafter(3), PROMPT + OUTPUT[:6], 4)[:2] == [10, 20] == [10, OUTPUT[6]]
    replay_retrieval(counter, NgramTreeDrafter(3), no_chain, PROMPT, OUTPUT, model_top=model_top, graft_counter=graft)
    assert graft.positions == counter.positions  # the same tree rounds: the model's siblings or the extras accept
    # position 0 leaves the retrieval's rank 0 (the model has it); position 6 moves from rank 1 to extra rank 0
    first, second, *rest = counter.rank_hits
    assert graft.rank_hits == [first, second - 1, *rest]


def test_chain_histogram_and_timing_use_the_sequence_proposal():
    counter = AcceptanceCounter(gamma=3, width=2)
    drafter = NgramTreeDrafter(3)

    def chain(committed, gamma):
        return drafter.propose(committed, gamma, SamplingConfig(), torch.Generator()).tokens

    replay_retrieval(counter, NgramTreeDrafter(3), chain, PROMPT, OUTPUT)
    assert sum(counter.hist) == counter.calls < len(OUTPUT) - 3 + 1  # one chain per round, not per position
    assert counter.hist[3] >= 1 and counter.seconds > 0  # "3 10 11" was there to copy at position 0


@pytest.mark.realmodel
def test_profile_measures_tree_statistics_for_every_drafter_kind(tiny_model_dir):
    from specplan.models.load import load_model
    from specplan.profiler.run import ProfileSettings, run_profile

    target = load_model(tiny_model_dir, "float32")
    specs = [parse_drafter_spec(spec) for spec in ("layerskip:2", "ngram:3", "recycle", "cache")]
    settings = ProfileSettings(max_new_tokens=24, repeats=1, gamma=4, rank_width=8)
    prompts = stratified(spec_bench_split("calibration"), 2)
    profile = run_profile(target, specs, prompts, torch.device("cpu"), settings)
    assert profile.calibration["graft_siblings"] == "layerskip-2"
    assert [entry.id for entry in profile.retrieval] == ["ngram-3", "recycle", "cache"]
    for drafter in ("ngram-3", "recycle", "cache"):
        entry = profile.acceptance_for(drafter, "target", 0.0)
        assert len(entry.rank_accept) == 8 == len(entry.retrieval_rank_accept)
        assert sum(entry.rank_accept) <= 1.0 and sum(entry.retrieval_rank_accept) <= sum(entry.rank_accept) + 1e-9
    assert len(profile.acceptance_for("layerskip-2", "target", 0.0).rank_accept) == 8
