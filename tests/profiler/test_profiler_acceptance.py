"""The profiler counts acceptance round by round, as the runtime drafts (only at round starts)."""

from __future__ import annotations

import types

import pytest
import torch

from specplan.core.plan import StageShape
from specplan.runtime.drafters.base import Drafter, SamplingConfig
from specplan.runtime.drafters.model import ModelDrafter
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.drafters.ngram_tree import NgramTreeDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.profiler.acceptance import (
    AcceptanceCounter,
    chain_rounds,
    replay_model,
    tree_round_positions,
)
from specplan.profiler.retrieval_acceptance import replay_retrieval
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")
PROMPTS = [[1, 5, 9, 5, 9, 5, 9, 12], [20, 21, 22, 23, 24, 25, 26, 27, 28, 20, 21]]
# A copied stretch of 6 tokens, then short matches: rounds of gamma 3 start at 0, 4, 7.
MATCHES = [True] * 6 + [False, True, False, False]
# Ranks of the verifier's token per output position (-1: not among the drafter's top 4).
RANKS = [0, -1, -1, 0, 0, 0, 2, -1]

pytestmark = pytest.mark.usefixtures("one_thread")


def per_position_histogram(matches: list[bool], gamma: int) -> list[int]:
    """The old count: a chain starting at every position (what over-weighted copied stretches)."""
    hist = [0] * (gamma + 1)
    for start in range(len(matches) - gamma + 1):
        accepted = 0
        while accepted < gamma and matches[start + accepted]:
            accepted += 1
        hist[accepted] += 1
    return hist


def simulated_runtime_histogram(matches: list[bool], gamma: int) -> list[int]:
    """A runtime loop over token ids: draft gamma tokens at the root, verify greedily, commit the
    accepted tokens and the bonus token; only rounds whose whole draft lies inside the output."""
    truth = [100 + position for position in range(len(matches))]
    drafted_at = [token if match else -1 for token, match in zip(truth, matches)]
    hist = [0] * (gamma + 1)
    committed = 0
    while committed + gamma <= len(truth):
        draft = drafted_at[committed : committed + gamma]
        accepted = next((index for index, token in enumerate(draft) if token != truth[committed + index]), gamma)
        hist[accepted] += 1
        committed += accepted + 1  # accepted tokens and the verifier's bonus token
    return hist


def test_round_histogram_equals_a_simulated_runtime_and_not_the_per_position_count():
    counter = AcceptanceCounter(gamma=3, width=4)
    counter.add_matches(MATCHES)
    assert chain_rounds(MATCHES, 3) == [(0, 3), (4, 2), (7, 1)]
    assert counter.hist == simulated_runtime_histogram(MATCHES, 3) == [0, 1, 1, 1]
    assert per_position_histogram(MATCHES, 3) == [1, 2, 1, 4]  # the stretch counted 4 times at 3
    assert counter.alpha == pytest.approx(6 / 8)  # MLE (arXiv 2211.17192): 6 accepted, 2 rejections


def test_tree_ranks_are_sampled_at_round_roots_and_along_the_accepted_path():
    assert tree_round_positions(len(RANKS), 2, lambda position, start: RANKS[position] >= 0) == [0, 1, 2, 3, 4, 6, 7]
    counter = AcceptanceCounter(gamma=2, width=4)
    counter.add_tree_ranks(RANKS)
    assert counter.positions == 7  # position 5 is the bonus token after a depth-2 path: no draft there
    assert counter.rank_hits == [3, 0, 1, 0]
    assert counter.rank_accept == pytest.approx((3 / 7, 0.0, 1 / 7, 0.0))


def noisy_copy(scale: float, seed: int = 3) -> torch.nn.Module:
    """The tiny target with its weights perturbed: a drafter that agrees with it in stretches."""
    network = tiny_llama("sdpa", seed=0)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.add_(scale * parameter.std() * torch.randn(parameter.shape, generator=generator))
    return network


def engine_rounds(result, gamma: int, length: int) -> list[int]:
    """Accepted tokens of the engine's rounds whose full gamma draft lies within ``length`` tokens."""
    accepted, start = [], 0
    for committed in result.committed_per_forward:
        if start + gamma <= length:
            accepted.append(committed - 1)
        start += committed
    return accepted


def histogram(accepted: list[int], gamma: int) -> list[int]:
    return [accepted.count(a) for a in range(gamma + 1)]


def test_model_replay_histogram_equals_the_engines_rounds():
    target, drafter, gamma, new_tokens = tiny_llama("sdpa", seed=0), noisy_copy(0.1), 4, 48
    engine = SpeculativeEngine(target, CPU, set(), drafter=ModelDrafter("noisy", drafter, CPU), gamma=gamma)
    counter, expected = AcceptanceCounter(gamma, width=4), []
    for prompt in PROMPTS:
        result = engine.generate(prompt, new_tokens, SamplingConfig())
        # the engine drafts a full chain while gamma + 1 tokens remain: compare over the first new_tokens - 1
        replay_model(counter, drafter, prompt, list(result.token_ids)[: new_tokens - 1], CPU)
        expected += engine_rounds(result, gamma, new_tokens - 1)
    assert counter.hist == histogram(expected, gamma)
    assert 0 < counter.hist[gamma] < sum(counter.hist)  # both full and partial acceptance occur


class CountingChain:
    """``chain(committed, gamma)`` of an n-gram sequence drafter, counting its calls."""

    def __init__(self):
        self.drafter = NgramDrafter(3)
        self.roots: list[int] = []  # len(committed) at each call

    def __call__(self, committed, gamma):
        self.roots.append(len(committed))
        return self.drafter.propose(committed, gamma, SamplingConfig(), torch.Generator()).tokens


def test_retrieval_chain_is_called_only_at_round_starts_of_the_engine():
    target, gamma, new_tokens = tiny_llama("sdpa", seed=0), 3, 40
    engine = SpeculativeEngine(target, CPU, set(), drafter=NgramDrafter(3), gamma=gamma)
    counter, expected, calls = AcceptanceCounter(gamma, width=4), [], 0
    for prompt in PROMPTS:
        result = engine.generate(prompt, new_tokens, SamplingConfig())
        chain = CountingChain()
        output = list(result.token_ids)[: new_tokens - 1]
        replay_retrieval(counter, NgramTreeDrafter(3), chain, prompt, output)
        rounds = engine_rounds(result, gamma, new_tokens - 1)
        expected += rounds
        starts = [len(prompt) + sum(result.committed_per_forward[:index]) for index in range(len(rounds))]
        # the engine's rounds whose chain fits the output, then at most gamma rounds near its end
        assert chain.roots[: len(starts)] == starts and len(chain.roots) - len(starts) <= gamma
        calls += len(chain.roots)
    inside = histogram(expected, gamma)
    assert all(count >= fitted for count, fitted in zip(counter.hist, inside))
    assert counter.calls == calls == sum(counter.hist) + sum(counter.censored)
    assert counter.hist[gamma] > 0  # the tiny model repeats itself: n-gram chains are accepted in full
    assert calls < 2 * (new_tokens - gamma)  # a chain per position would be 2 * (new_tokens - gamma) calls


class RecordingNgramTree(NgramTreeDrafter):
    """An n-gram tree drafter that records the committed length at each ``prepare`` (a round's root)."""

    def __init__(self, max_ngram: int):
        super().__init__(max_ngram)
        self.passes: list[list[int]] = []

    def reset(self) -> None:
        super().reset()
        self.passes.append([])

    def prepare(self, committed: list[int]) -> None:
        if self.passes and (not self.passes[-1] or self.passes[-1][-1] != len(committed)):
            self.passes[-1].append(len(committed))
        super().prepare(committed)


def test_retrieval_rank_replay_plays_the_tree_engines_rounds():
    """A full binary tree of depth 2 (the replay's tree for width 2, gamma 2) on the engine."""
    target, new_tokens, depth = tiny_llama("sdpa", seed=0), 40, 2
    shape, full_depth = StageShape("tree", parents=(-1, 0, 0, 1, 1, 2, 2)), []
    for prompt in PROMPTS:
        runtime = RecordingNgramTree(3)
        result = SpeculativeEngine(target, CPU, set(), drafter=runtime, tree=shape).generate(
            prompt, new_tokens, SamplingConfig())
        replay = RecordingNgramTree(3)
        counter = AcceptanceCounter(gamma=depth, width=2)
        replay_retrieval(counter, replay, lambda committed, gamma: (), prompt, list(result.token_ids))
        uncapped = [root for root in runtime.passes[-1] if root - len(prompt) + depth + 1 <= new_tokens]
        assert replay.passes[1][: len(uncapped)] == uncapped  # pass 0: chains, pass 1: tree ranks
        full_depth.extend(later - root == depth + 1 for root, later in zip(uncapped, uncapped[1:]))
        assert sum(counter.rank_hits) > 0
    assert any(full_depth)  # some rounds accepted a depth-2 path: their bonus position was not ranked


class ScriptedDrafter(Drafter):
    """Retrieval candidates scripted per output position: ``ranks[p]`` places the truth there."""

    context_tokens = 10**6  # the whole committed text: its length tells the output position

    def __init__(self, prompt: list[int], ranks: list[int]):
        self.prompt, self.ranks = prompt, ranks

    def reset(self) -> None:
        pass

    def prepare(self, committed: list[int]) -> None:
        pass

    def successors(self, context: list[int], count: int):
        position = len(context) - len(self.prompt)
        tokens = [500 + position * 10 + index for index in range(count)]
        if self.ranks[position] >= 0:
            tokens[self.ranks[position]] = 100 + position
        return types.SimpleNamespace(tokens=tuple(tokens[:count]))


def test_graft_ranks_follow_the_grafted_trees_rounds():
    prompt, output = [1, 2, 3], [100 + position for position in range(len(RANKS))]
    model_top = torch.full((len(output), 2), 999)  # [output, B]
    model_top[1, 0] = output[1]  # the model has the token where retrieval misses it
    alone, graft = AcceptanceCounter(gamma=2, width=4), AcceptanceCounter(gamma=2, width=4)
    replay_retrieval(alone, ScriptedDrafter(prompt, RANKS), lambda committed, gamma: (), prompt, output,
                     model_top=model_top, graft_counter=graft)
    assert (alone.positions, alone.rank_hits) == (7, [3, 0, 1, 0])  # as add_tree_ranks counts RANKS
    # grafted rounds: 0-1 (depth 2 through the model's child), 3-4, 6-7; position 1 counts as no extra
    assert (graft.positions, graft.rank_hits) == (6, [3, 0, 1, 0])


def test_retrieval_rounds_record_how_many_tokens_the_lookup_drafted():
    """``drafted_hist[d]``: rounds whose lookup proposed d of gamma tokens. With keys of at least
    3 tokens (ngram:3:3), a text that never repeats 3 tokens drafts nothing in every round."""
    gamma = 3
    counter = AcceptanceCounter(gamma, width=4)
    chain = lambda committed, wanted: NgramDrafter(3, 3).propose(  # noqa: E731
        committed, wanted, SamplingConfig(), torch.Generator()).tokens
    replay_retrieval(counter, NgramTreeDrafter(3, 3), chain, [1, 2, 3, 4], [5, 6, 7, 8, 9, 10, 11, 12])
    assert counter.drafted_hist == [sum(counter.hist), 0, 0, 0] and counter.hist[0] == sum(counter.hist)
    copying = AcceptanceCounter(gamma, width=4)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3]
    replay_retrieval(copying, NgramTreeDrafter(3, 3), chain, prompt, [4, 5, 6, 7, 8, 1, 2, 3, 4, 9, 9, 9, 9])
    assert sum(copying.drafted_hist) == sum(copying.hist) and copying.drafted_hist[gamma] >= 2
    assert copying.drafted_hist[0] >= 1  # after "9 9 9" nothing of 3 tokens recurs until the 9s repeat


def test_match_only_lookups_are_profiled_with_longer_chains():
    from specplan.core.drafter_spec import parse_drafter_spec
    from specplan.profiler.run import ProfileSettings, chain_length

    from specplan.profiler.latency import LLAMA_CPP_WIDTHS, WIDTHS

    settings = ProfileSettings.quick()
    assert chain_length(parse_drafter_spec("ngram:8:3"), settings) == settings.lookup_gamma == 63
    assert settings.lookup_gamma + 1 == max(WIDTHS) == max(LLAMA_CPP_WIDTHS)  # its verify is one the curves time
    assert chain_length(parse_drafter_spec("ngram:5"), settings) == settings.gamma == 8
