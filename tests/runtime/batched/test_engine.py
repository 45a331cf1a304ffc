"""The batched sequence stage on tiny random Llamas: every sequence of a batch token-identical
(float32) to that prompt decoded alone by plain greedy decoding, with prompts of different
lengths, different accepted lengths per round, rollback holes kept or packed, and EOS."""

from __future__ import annotations

import functools

import pytest
import torch

from specplan.runtime.batched.engine import BatchedEngine
from specplan.runtime.batched.cache import BatchedKV
from specplan.runtime.batched.drafters import BatchedModelDrafter, PerSequenceDrafters
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.layerskip import layer_skip_view, parse_kept_layers
from specplan.runtime.drafters.model import ModelDrafter
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.engine import SpeculativeEngine
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")
PROMPTS = [
    [1, 5, 9, 5, 9, 5, 9, 12],
    [3, 4, 5, 6, 7, 3, 4, 5],
    [20, 21, 22, 23, 24, 25, 26, 27, 28, 20, 21],
    [7],
    [8] * 17,
]
NEW_TOKENS = 24


def plain_alone(target, prompts, new_tokens=NEW_TOKENS, eos=frozenset()):
    engine = SpeculativeEngine(target, CPU, eos_ids=set(eos))
    return [list(engine.generate(prompt, new_tokens, SamplingConfig()).token_ids) for prompt in prompts]


def drafter(name: str, attn: str, target=None):
    if name == "ngram":
        return PerSequenceDrafters(lambda: NgramDrafter(3)), 4
    if name == "model":
        return BatchedModelDrafter("model", tiny_llama(attn, seed=1), CPU), 3
    if name == "layerskip":  # the target's layer 1 alone: layer 0's cache stays empty
        return BatchedModelDrafter("layerskip-1", layer_skip_view(target, parse_kept_layers("1", 2)), CPU), 3
    if name == "self":  # the target itself: every draft accepted
        return BatchedModelDrafter("self", tiny_llama(attn, seed=0), CPU), 4
    return None, 0


@functools.cache
def reference(attn: str) -> list[list[int]]:
    return plain_alone(tiny_llama(attn, seed=0), PROMPTS)


# compact_holes 0: the cache is packed after every round; 1: never (rollback holes stay masked)
@pytest.mark.parametrize("attn, name, compact_holes", [
    ("sdpa", "plain", 1.0), ("sdpa", "ngram", 0.0), ("sdpa", "ngram", 1.0), ("eager", "ngram", 1.0),
    ("sdpa", "model", 1.0), ("eager", "model", 0.0), ("sdpa", "self", 0.25), ("sdpa", "layerskip", 1.0),
])
def test_batched_is_token_identical_to_each_prompt_alone(attn, name, compact_holes):
    target = tiny_llama(attn, seed=0)
    draft, gamma = drafter(name, attn, target)
    engine = BatchedEngine(target, CPU, set(), draft, gamma, compact_holes=compact_holes)
    result = engine.generate(PROMPTS, NEW_TOKENS)
    assert [list(sequence.token_ids) for sequence in result.sequences] == reference(attn)
    assert all(sequence.stop_reason == "max_new_tokens" for sequence in result.sequences)
    assert result.new_tokens == NEW_TOKENS * len(PROMPTS)
    assert 0 < result.prefill_seconds < result.seconds  # the prompts' forward, timed apart
    assert result.decode_tokens_per_s == pytest.approx(
        (result.new_tokens - len(PROMPTS)) / (result.seconds - result.prefill_seconds))
    if name == "self":
        assert result.rounds < NEW_TOKENS / 2  # full acceptance: far fewer target forwards than tokens
    if name == "ngram":  # sequences accept different lengths in the same rounds
        assert len({round(sequence.mean_accepted, 3) for sequence in result.sequences}) > 1


def test_batched_stops_each_sequence_at_its_own_eos():
    target = tiny_llama("sdpa", seed=0)
    alone = reference("sdpa")
    eos = {alone[0][3], alone[2][10]}
    expected = plain_alone(target, PROMPTS, eos=eos)
    draft, gamma = drafter("ngram", "sdpa")
    result = BatchedEngine(target, CPU, eos, draft, gamma).generate(PROMPTS, NEW_TOKENS)
    assert [list(sequence.token_ids) for sequence in result.sequences] == expected
    stopped = [sequence.stop_reason for sequence in result.sequences]
    assert stopped[0] == "eos" and "max_new_tokens" in stopped or all(s == "eos" for s in stopped)
    assert len(result.sequences[0].token_ids) < NEW_TOKENS


def test_rollback_leaves_holes_that_the_mask_hides():
    """Rejected drafts of one sequence leave masked slots beside another's accepted ones; the next
    forward still reads each sequence's own tokens only (checked against the logits alone)."""
    target = tiny_llama("eager", seed=0)
    prompts = [[1, 2, 3, 4, 5], [9, 8]]
    kv = BatchedKV(target, CPU, compact_holes=1.0)
    kv.forward(prompts)
    kv.keep([5, 2])
    kv.forward([[6, 40, 41], [7, 50, 51]])
    kv.keep([3, 1])  # sequence 0 keeps its root and two draft tokens, sequence 1 its root only
    assert kv.holes() > 0 and kv.lengths() == [8, 3]
    logits = kv.forward([[42], [60]])
    for index, text in enumerate([[1, 2, 3, 4, 5, 6, 40, 41, 42], [9, 8, 7, 60]]):
        with torch.no_grad():
            alone = target(torch.tensor([text])).logits[0, -1]
        torch.testing.assert_close(logits[index, 0], alone, rtol=1e-4, atol=1e-4)


def test_bad_batches_are_refused():
    target = tiny_llama("eager", seed=0)
    with pytest.raises(ValueError):
        BatchedEngine(target, CPU, set(), None, gamma=2)
    with pytest.raises(ValueError):
        BatchedEngine(target, CPU, set()).generate([[1], []], 4)


@pytest.mark.parametrize("kind", ["model", "layerskip"])
def test_batched_model_drafter_proposes_what_it_would_alone(kind):
    """Drafts (not only outputs) match the one-sequence drafter, also after a rollback of each
    sequence's cache to a different committed prefix."""
    target = tiny_llama("sdpa", seed=0)
    network = tiny_llama("sdpa", seed=1) if kind == "model" else layer_skip_view(target, parse_kept_layers("1", 2))
    batched = BatchedModelDrafter(kind, network, CPU)
    alone = ModelDrafter(kind, network, CPU)
    texts = [list(prompt) for prompt in PROMPTS]
    batched.reset(len(texts))
    for round_index in range(3):
        drafts = batched.propose(texts, [4] * len(texts))
        expected = []
        for text in texts:
            alone.reset()
            expected.append(alone.propose(text, 4, SamplingConfig(), torch.Generator()).tokens)
        assert drafts == expected
        # commit a different share of each draft, then a token the drafter did not propose
        texts = [text + list(draft[: (index + round_index) % 4]) + [90 - index] for index, (text, draft)
                 in enumerate(zip(texts, drafts))]


@pytest.mark.parametrize("name", ["ngram", "model"])
def test_a_sequence_ending_at_its_first_token_leaves_before_any_draft(name):
    target = tiny_llama("sdpa", seed=0)
    eos = {reference("sdpa")[3][0]}  # prompt 3's first new token ends it at the prefill
    draft, gamma = drafter(name, "sdpa", target)
    result = BatchedEngine(target, CPU, eos, draft, gamma).generate(PROMPTS, NEW_TOKENS)
    assert [list(s.token_ids) for s in result.sequences] == plain_alone(target, PROMPTS, eos=eos)
    assert result.sequences[3].token_ids == tuple(eos) and result.sequences[3].committed_per_forward == ()



def test_a_model_drafter_the_runner_already_runs_is_not_loaded_again(monkeypatch):
    """A ``--batch`` run reuses the network of the runner's own ``model:`` drafter (found by its
    name among the engine's drafters, a hierarchy's and an adaptive plan's included)."""
    from types import SimpleNamespace

    from specplan.core.drafter_spec import parse_drafter_spec
    from specplan.runtime.batched import build as batched_build

    network = tiny_llama("sdpa", seed=1)
    runner = SimpleNamespace(engine=SimpleNamespace(drafter=ModelDrafter("model-tiny", network, CPU)))
    monkeypatch.setattr(batched_build, "build_drafter", lambda *arguments: pytest.fail("loaded a second time"))
    assert batched_build.drafter_network(runner, parse_drafter_spec("model:some/folder/tiny")) is network
    built = SimpleNamespace(model="built")
    monkeypatch.setattr(batched_build, "build_drafter", lambda *arguments: built)
    other = SimpleNamespace(engine=runner.engine, target=None, device=CPU, runtime=None)
    assert batched_build.drafter_network(other, parse_drafter_spec("model:other")) == "built"
