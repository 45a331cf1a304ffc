"""The EAGLE-style draft head at run time: feature bookkeeping, exact drafts, lossless output."""

from __future__ import annotations

import pytest
import torch

from specplan.core.plan import StageShape
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.graft import GraftDrafter
from specplan.runtime.drafters.head import HeadDrafter
from specplan.runtime.drafters.head_model import DraftHead, head_config, load_head, save_head
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.session import ModelSession
from specplan.runtime.tree import DraftTree
from tests.runtime.test_engine import PROMPTS, reference_greedy
from tests.runtime.test_tree_engine import PROMPT, chi_square_pvalue, third_token_distribution, third_tokens
from tests.runtime.tiny_models import TINY_VOCAB, tiny_llama

CPU = torch.device("cpu")
STATIC = StageShape("tree", parents=(-1, 0, 0, 0, 1, 1, 2, 4, 4, 7))
DYNAMIC = StageShape("tree", budget=10, depth=4, dynamic=True)

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_head(target, seed: int = 1, kept: int = TINY_VOCAB) -> DraftHead:
    """A random head for ``target`` (sharpened so argmax and ranks matter), ``kept`` tokens in its vocabulary."""
    torch.manual_seed(seed)
    vocab_ids = torch.randperm(TINY_VOCAB)[:kept].sort().values
    head = DraftHead(head_config(target.config), vocab_ids)
    with torch.no_grad():
        head.lm_head.weight.mul_(20.0)
    head.share_embedding(target.get_input_embeddings())
    return head.eval()


def true_features(target, token_ids: list[int]) -> torch.Tensor:
    """The target's last hidden states [len, hidden] from one fresh forward (no cache)."""
    with torch.no_grad():
        return target.get_decoder()(input_ids=torch.tensor([token_ids])).last_hidden_state[0]


def fresh_chain(head: DraftHead, target, committed: list[int], gamma: int) -> list[int]:
    """Reference: the head over every committed position from scratch, then gamma greedy steps."""
    features = true_features(target, committed[:-1])  # f_0 .. f_{L-2}
    tokens = list(committed[1:])
    drafted = []
    with torch.no_grad():
        for _ in range(gamma):
            output = head(input_ids=torch.tensor([tokens]), features=features[None])
            token = int(output.logits[0, -1].argmax())
            drafted.append(token)
            features = torch.cat([features, output.features[0, -1:]])
            tokens.append(token)
    return drafted


class CheckedHead(HeadDrafter):
    """A head drafter that checks every proposal against the from-scratch reference."""

    checked = 0

    def propose(self, committed, gamma, sampling, generator):
        proposal = super().propose(committed, gamma, sampling, generator)
        if len(committed) >= 2:
            assert list(proposal.tokens) == fresh_chain(self.session.model, self.verifier.model, committed, gamma)
            CheckedHead.checked += 1
        return proposal


def test_session_features_follow_extend_keep_and_rewind():
    target = tiny_llama("sdpa", seed=0)
    session = ModelSession(target, CPU)
    session.keep_features = True
    session.extend([1, 5, 9, 5, 9])
    past = len(session.cached)
    tree = DraftTree((-1, 0, 0, 1, 2), torch.tensor([9, 12, 13, 14, 15]))
    session.extend(tree.token_list, tree=tree)
    session.keep(past, [0, 2, 4])  # a non-prefix path
    assert session.cached == [1, 5, 9, 5, 9, 9, 13, 15]
    torch.testing.assert_close(session.features, true_features(target, session.cached), atol=1e-4, rtol=1e-4)
    session.rewind_to([1, 5, 9, 5, 7, 7])
    assert len(session.features) == len(session.cached) == 4
    torch.testing.assert_close(session.features, true_features(target, session.cached), atol=1e-4, rtol=1e-4)


def test_every_chain_proposal_is_what_a_fresh_head_drafts():
    """Across rounds the head's cache mixes true and estimated features; a misaligned row or a
    stale estimate would change a proposal."""
    target = tiny_llama("sdpa", seed=0)
    CheckedHead.checked = 0
    engine = SpeculativeEngine(target, CPU, set(), CheckedHead("head", tiny_head(target), CPU), gamma=3)
    for prompt in PROMPTS:
        engine.generate(prompt, 16, SamplingConfig())
    assert CheckedHead.checked >= 3 * 4


def test_accepted_drafts_are_fed_again_with_true_features():
    """When drafts are accepted, the head's positions for them (computed from its own
    estimates) must be recomputed from the verifier's features in the next round."""
    target = tiny_llama("sdpa", seed=0)
    head = tiny_head(target)
    drafter = HeadDrafter("head", head, CPU)
    verifier = ModelSession(target, CPU)
    drafter.attach_verifier(verifier)
    committed = list(PROMPTS[2])
    verifier.extend(committed[:-1])
    for accepted in (3, 1, 2):
        proposal = drafter.propose(committed, 4, SamplingConfig(), torch.Generator())
        assert list(proposal.tokens) == fresh_chain(head, target, committed, 4)
        chunk = list(proposal.tokens[:accepted]) + [7]  # as if the verifier accepted them, then a bonus
        verifier.extend([committed[-1], *chunk[:-1]])
        committed += chunk
    assert list(drafter.propose(committed, 4, SamplingConfig(), torch.Generator()).tokens) == fresh_chain(head, target, committed, 4)


@pytest.mark.parametrize("kept", [TINY_VOCAB, 40], ids=["full-vocabulary", "trimmed"])
@pytest.mark.parametrize("shape", [dict(gamma=1), dict(gamma=4), dict(tree=STATIC), dict(tree=DYNAMIC)],
                         ids=["gamma1", "gamma4", "static-tree", "dynamic-tree"])
def test_head_plans_are_greedy_identical(shape, kept):
    target = tiny_llama("sdpa", seed=0)
    engine = SpeculativeEngine(target, CPU, set(), HeadDrafter("head", tiny_head(target, kept=kept), CPU), **shape)
    for prompt in PROMPTS:
        assert list(engine.generate(prompt, 20, SamplingConfig()).token_ids) == reference_greedy(target, prompt, 20)


def test_a_grafted_head_tree_is_greedy_identical():
    target = tiny_llama("sdpa", seed=0)
    drafter = GraftDrafter(HeadDrafter("head", tiny_head(target), CPU), RecycleDrafter(), 3)
    engine = SpeculativeEngine(target, CPU, set(), drafter, tree=DYNAMIC)
    for prompt in PROMPTS:
        assert list(engine.generate(prompt, 20, SamplingConfig()).token_ids) == reference_greedy(target, prompt, 20)


def test_a_trimmed_head_only_drafts_kept_tokens():
    target = tiny_llama("sdpa", seed=0)
    head = tiny_head(target, kept=10)
    drafter = HeadDrafter("head", head, CPU)
    verifier = ModelSession(target, CPU)
    drafter.attach_verifier(verifier)
    committed = PROMPTS[0]
    verifier.extend(committed[:-1])
    tree = drafter.propose_tree(committed, DYNAMIC, SamplingConfig(), torch.Generator())
    assert set(tree.token_list[1:]) <= set(head.vocab_ids.tolist())
    proposal = drafter.propose(committed, 4, SamplingConfig(1.0), torch.Generator().manual_seed(0))
    outside = torch.ones(TINY_VOCAB, dtype=torch.bool)
    outside[head.vocab_ids] = False
    assert proposal.draft_probs[:, outside].sum() == 0 and set(proposal.tokens) <= set(head.vocab_ids.tolist())


def test_a_head_without_its_verifier_features_says_so():
    target = tiny_llama("sdpa", seed=0)
    with pytest.raises(RuntimeError, match="verifier's features"):
        HeadDrafter("head", tiny_head(target), CPU).propose(PROMPTS[0], 3, SamplingConfig(), torch.Generator())


@pytest.mark.parametrize("shape", [dict(gamma=3), dict(tree=STATIC)], ids=["chain", "tree"])
def test_sampled_head_output_has_the_target_distribution(shape):
    """Chi-square: the 3rd token (drafted at depth >= 2, or a bonus) ~ the target's marginal."""
    target = tiny_llama("sdpa", seed=0)
    engine = SpeculativeEngine(target, CPU, set(), HeadDrafter("head", tiny_head(target, kept=60), CPU), **shape)
    assert chi_square_pvalue(third_tokens(engine, 1200), third_token_distribution(target, PROMPT)) > 1e-3


def test_a_saved_head_loads_with_the_same_drafts(tmp_path):
    target = tiny_llama("sdpa", seed=0)
    head = tiny_head(target, kept=50)
    save_head(head, tmp_path / "head", {"target": {"source": "tiny"}})
    loaded = load_head(tmp_path / "head", target, torch.float32, CPU)
    assert fresh_chain(loaded, target, PROMPTS[1], 5) == fresh_chain(head, target, PROMPTS[1], 5)
    other = tiny_llama("sdpa", seed=0)
    other.config.hidden_size = 64
    with pytest.raises(Exception, match="hidden_size"):
        load_head(tmp_path / "head", other, torch.float32, CPU)


def test_head_latency_times_the_drafters_own_call_and_leaves_the_cache_as_it_was(monkeypatch):
    """The profiler times a head as the drafter calls it (HeadSession.extend_with + top-k per row)."""
    from specplan.runtime.drafters.head import HeadSession
    from specplan.profiler.latency import measure_head_latency

    head = tiny_head(tiny_llama("sdpa", seed=0))
    calls, lengths = [], []
    original = HeadSession.extend_with

    def counted(self, tokens, features, tree=None):
        calls.append(len(tokens))
        assert features.shape == (len(tokens), head.config.hidden_size)
        lengths.append(len(self.cached))
        return original(self, tokens, features, tree)

    monkeypatch.setattr(HeadSession, "extend_with", counted)
    curve = measure_head_latency(head, CPU, list(range(3, 40)), widths=(1, 4), repeats=2)
    assert curve.n == (1, 4) and curve.context == 37 and all(ms > 0 for ms in curve.ms)
    assert calls == [36] + [1, 4] * 3  # the context once, then a warm-up pass and two timed passes
    assert set(lengths[1:]) == {36}  # every timed call starts from the context alone


def test_head_latency_with_a_verifier_times_each_call_right_after_a_verifier_step(monkeypatch):
    from specplan.runtime.drafters.head import HeadSession
    from specplan.profiler.latency import measure_head_latency

    target = tiny_llama("sdpa", seed=0)
    head = tiny_head(target)
    events = []
    original = ModelSession.extend

    def recorded(self, tokens, tree=None):
        events.append(("head" if isinstance(self, HeadSession) else "verifier", len(tokens)))
        return original(self, tokens, tree)

    monkeypatch.setattr(ModelSession, "extend", recorded)
    context = list(range(3, 40))
    measure_head_latency(head, CPU, context, widths=(1, 4), repeats=2, verifier=target)
    assert events[:2] == [("head", 36), ("verifier", 37)]  # both hold the context first
    timed = events[2:]
    assert timed[0::2] == [("verifier", 1)] * 7 and timed[1::2] == [("head", 1), ("head", 4)] * 3


def test_a_head_over_a_qwen2_target_has_one_full_attention_layer():
    """Qwen2's config lists a layer type per target layer; the head's config lists its one layer
    (the 1.5B testbed's distillation failed on the 28-entry list)."""
    from transformers import Qwen2Config

    target_config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                num_attention_heads=4, num_key_value_heads=2)
    assert len(target_config.layer_types) == 3
    config = head_config(target_config)
    assert config.num_hidden_layers == 1 and config.layer_types == ["full_attention"]
    head = DraftHead(config, torch.arange(64))
    assert sum(parameter.numel() for parameter in head.parameters()) > 0


@pytest.mark.parametrize("layout", ["eagle1", "eagle3"])
def test_a_new_head_over_a_qwen2_target_starts_from_its_last_layer(layout):
    """Qwen2's q, k and v carry biases: the EAGLE-1 head copies them (o_proj's starts at zero, so
    the copy computes what the target's layer does); EAGLE-3's layer has none."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from specplan.distill.head_train import new_head

    torch.manual_seed(0)
    target = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2)).eval()
    head = new_head(target, torch.arange(48), layout)
    last = target.model.layers[-1].self_attn
    if layout == "eagle1":
        assert torch.equal(head.layer.self_attn.q_proj.bias, last.q_proj.bias)
        assert torch.count_nonzero(head.layer.self_attn.o_proj.bias) == 0
    else:
        assert head.self_attn.q_proj.bias is None and head.self_attn.o_proj.bias is None
