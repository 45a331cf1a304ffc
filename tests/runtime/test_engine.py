"""The sequence-stage engine on tiny random models: lossless greedy and sampling."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from scipy import stats

from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.layerskip import layer_skip_view, parse_kept_layers
from specplan.runtime.drafters.model import ModelDrafter
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.engine import SpeculativeEngine
from tests.runtime.tiny_models import TINY_VOCAB, tiny_llama

CPU = torch.device("cpu")
PROMPTS = [[1, 5, 9, 5, 9, 5, 9, 12], [3, 4, 5, 6, 7, 3, 4, 5], [20, 21, 22, 23, 24, 25, 26, 27, 28, 20, 21]]


def reference_greedy(model, prompt: list[int], new_tokens: int) -> list[int]:
    """Slow reference: full recompute (no cache) and argmax, one token at a time."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(new_tokens):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def drafters(target, runtime: RuntimeMode = EAGER):
    other = tiny_llama("sdpa", seed=1)
    return {
        "ngram": NgramDrafter(3),
        "layerskip": ModelDrafter("layerskip-1", layer_skip_view(target, parse_kept_layers("1", 2)), CPU, runtime),
        "model": ModelDrafter("model", other, CPU, runtime),
        "self": ModelDrafter("self", tiny_llama("sdpa", seed=0), CPU, runtime),  # the target itself: every draft accepted
    }


@pytest.mark.parametrize("name", ["ngram", "layerskip", "model", "self"])
@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_is_token_identical_to_plain(name, gamma):
    target = tiny_llama("sdpa", seed=0)
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=drafters(target)[name], gamma=gamma)
    for prompt in PROMPTS:
        result = engine.generate(prompt, 24, SamplingConfig())
        assert list(result.token_ids) == reference_greedy(target, prompt, 24)
        assert sum(result.committed_per_forward) == 24
    if name == "self":
        assert result.mean_accepted > gamma  # the perfect drafter is accepted in full (bonus included)


@pytest.mark.parametrize("stage", ["sequence", "tree", "learning tree"])
def test_greedy_round_reads_rows_only_when_watched(stage):
    """A greedy round asks the target for its rows' argmax alone (``extend_best_tokens``) unless
    something reads the rows: a listener, or a drafter that learns from them (Token Recycling),
    which then sees every verify forward's rows. The output is the plain greedy one either way."""
    from specplan.core.plan import StageShape
    from specplan.runtime.drafters.ngram_tree import NgramTreeDrafter
    from specplan.runtime.drafters.recycle import RecycleDrafter
    from specplan.runtime.session import ModelSession

    class CountingSession(ModelSession):
        best_calls = 0

        def extend_best_tokens(self, tokens, tree=None):
            self.best_calls += 1
            return super().extend_best_tokens(tokens, tree)

    target = tiny_llama("sdpa", seed=0)
    session = CountingSession(target, CPU)
    tree = StageShape("tree", parents=(-1, 0, 0, 1))
    engine = {"sequence": lambda: SpeculativeEngine(session, CPU, eos_ids=set(), drafter=NgramDrafter(3), gamma=3),
              "tree": lambda: SpeculativeEngine(session, CPU, eos_ids=set(), drafter=NgramTreeDrafter(3), tree=tree),
              "learning tree": lambda: SpeculativeEngine(session, CPU, eos_ids=set(), drafter=RecycleDrafter(), tree=tree),
              }[stage]()
    prompt, watched = PROMPTS[0], stage == "learning tree"
    assert list(engine.generate(prompt, 16, SamplingConfig()).token_ids) == reference_greedy(target, prompt, 16)
    assert session.best_calls == (0 if watched else session.forwards - 1)  # every forward but the prefill
    seen = []
    engine.stage.listeners.append(lambda tokens, logits, parents: seen.append((len(tokens), tuple(logits.shape))))
    before = session.best_calls
    assert list(engine.generate(prompt, 16, SamplingConfig()).token_ids) == reference_greedy(target, prompt, 16)
    assert session.best_calls == before and seen and all(rows == (n, TINY_VOCAB) for n, rows in seen)


def test_plain_engine_matches_transformers_and_stops_at_eos():
    target = tiny_llama("sdpa", seed=0)
    prompt = PROMPTS[0]
    reference = reference_greedy(target, prompt, 16)
    engine = SpeculativeEngine(target, CPU, eos_ids={reference[5]})
    result = engine.generate(prompt, 16, SamplingConfig())
    first = reference.index(reference[5])
    assert list(result.token_ids) == reference[: first + 1]
    assert result.stop_reason == "eos"


def test_sampling_is_seeded_and_reproducible():
    target = tiny_llama("sdpa", seed=0)
    engine = SpeculativeEngine(target, CPU, set(), ModelDrafter("m", tiny_llama("sdpa", seed=1), CPU), 3)
    first = engine.generate(PROMPTS[1], 12, SamplingConfig(1.0, 1.0, seed=7)).token_ids
    again = engine.generate(PROMPTS[1], 12, SamplingConfig(1.0, 1.0, seed=7)).token_ids
    other = engine.generate(PROMPTS[1], 12, SamplingConfig(1.0, 1.0, seed=8)).token_ids
    assert first == again
    assert first != other


def second_token_distribution(target, prompt, temperature):
    """Exact distribution of the second generated token (marginal over the first)."""
    with torch.no_grad():
        logits = target(torch.tensor([prompt])).logits[0, -1]
        first = torch.softmax(logits / temperature, -1)
        contexts = torch.tensor([prompt + [token] for token in range(TINY_VOCAB)])
        second = torch.softmax(target(contexts).logits[:, -1] / temperature, -1)
    return (first[:, None] * second).sum(0).double().numpy()


@pytest.mark.parametrize("name", ["ngram", "model"])
def test_sampled_output_has_the_target_distribution(name):
    """Chi-square: the 2nd token drawn by speculative sampling ~ the target's own marginal."""
    target = tiny_llama("sdpa", seed=0)
    prompt = [5, 9, 5, 9, 5, 9, 5]
    engine = SpeculativeEngine(target, CPU, set(), drafters(target)[name], 3)
    expected = second_token_distribution(target, prompt, 1.0)
    draws = 1500
    counts = collections.Counter(
        engine.generate(prompt, 2, SamplingConfig(1.0, 1.0, seed=seed)).token_ids[1] for seed in range(draws)
    )
    order = np.argsort(-expected)
    observed = np.array([counts.get(int(token), 0) for token in order], dtype=float)
    wanted = expected[order] * draws
    keep = np.cumsum(wanted) <= draws * 0.97  # pool the tail into one bin so every bin expects >= ~5
    observed = np.append(observed[keep], observed[~keep].sum())
    wanted = np.append(wanted[keep], wanted[~keep].sum())
    assert stats.chisquare(observed, wanted * observed.sum() / wanted.sum()).pvalue > 1e-3


def test_a_kept_cache_prefills_only_what_the_next_prompt_adds():
    """generate(keep_cache=True): the second prompt shares its first tokens with the first request's
    text; the cache keeps them (cached_tokens), and every output is still the target's own greedy."""
    target = tiny_llama("sdpa", seed=0)
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=NgramDrafter(3), gamma=3)
    first, second = PROMPTS[0], PROMPTS[0][:5] + [30, 31, 32]
    results = [engine.generate(prompt, 12, SamplingConfig(), keep_cache=True) for prompt in (first, second, first)]
    assert [list(result.token_ids) for result in results] == \
        [reference_greedy(target, prompt, 12) for prompt in (first, second, first)]
    assert [result.cached_tokens for result in results] == [0, 5, 5]
    assert engine.generate(first, 12, SamplingConfig()).cached_tokens == 0  # the default starts afresh
