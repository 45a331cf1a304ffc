"""torch.compile'd steps over the static cache (tiny random Llamas, float32).

Compiling a graph takes tens of seconds on 2 CPU cores, so these tests use one bucket of 16
(every width up to 16 pads to it) and reuse the module's models: each model compiles once.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from specplan.core.plan import StageShape
from specplan.core.runtime_modes import RuntimeMode
from specplan.runtime.compile import compiled
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.session import ModelSession
from specplan.runtime.tree import DraftTree
from tests.runtime.test_engine import PROMPTS, reference_greedy
from tests.runtime.compile.test_static_cache import assert_same_logits, script
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")
COMPILED = RuntimeMode("jit")  # the in-process torch.compile path (tests/runtime/compile/test_aot.py covers packages)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module", autouse=True)
def one_bucket():
    saved = compiled.BUCKETS
    compiled.BUCKETS = (16,)
    yield
    compiled.BUCKETS = saved


@pytest.fixture(scope="module")
def target():
    return tiny_llama("sdpa", seed=0)


def test_buckets_and_padding_mask():
    assert compiled.bucket_of(3) == 16 and compiled.bucket_of(17) is None
    tree = DraftTree((-1, 0, 0, 1), torch.tensor([4, 5, 6, 7]))
    mask = compiled.padded_mask(5, 4, 8, 14, torch.float32, CPU, tree)[0, 0]  # [bucket 8, kv 14]
    assert torch.equal(mask[:4, :9], tree.attention_mask(5, torch.float32, CPU)[0, 0])
    blocked = torch.finfo(torch.float32).min
    assert (mask[:4, 9:] == blocked).all()  # no real row sees padding
    assert (mask[4:, :5] == 0).all() and (mask[7, :13] == 0).all() and mask[4, 10] == blocked


def test_compiled_session_gives_the_dynamic_logits_and_compiles_once(target):
    reference = script(ModelSession(target, CPU, cache="dynamic"))
    first = ModelSession(target, CPU, cache="static", compiled=True)
    assert_same_logits(reference, script(first))
    graphs = counters["stats"]["unique_graphs"]
    calls = first.step.calls
    second = ModelSession(target, CPU, cache="static", compiled=True)  # new buffers, same graph
    assert_same_logits(reference, script(second))
    assert first.step is second.step and first.compile_seconds > 0
    assert counters["stats"]["unique_graphs"] == graphs  # other cache lengths and buffers: no recompile
    assert second.step.calls == 2 * calls > 0  # every forward but the 37-token prefill ran compiled


def test_a_mask_that_lets_rows_see_padding_is_caught(target, monkeypatch):
    """The logits comparison can fail: real rows attending to the padding rows change the result."""
    reference = script(ModelSession(target, CPU, cache="dynamic"))

    def leaky(past, count, bucket, kv_length, dtype, device, tree=None):
        return torch.zeros((1, 1, bucket, kv_length), dtype=dtype, device=device)

    monkeypatch.setattr(compiled, "padded_mask", leaky)
    with pytest.raises(AssertionError):
        assert_same_logits(reference, script(ModelSession(target, CPU, cache="static", compiled=True)))


def test_two_models_of_one_shape_keep_their_own_weights(target):
    """Frozen graphs hold weights: a second model of the same shape must not reuse the first's."""
    other = tiny_llama("sdpa", seed=1)
    for model in (target, other):
        reference = script(ModelSession(model, CPU, cache="dynamic"))
        assert_same_logits(reference, script(ModelSession(model, CPU, cache="static", compiled=True)))


@pytest.mark.parametrize("shape", [None, StageShape("tree", parents=(-1, 0, 0, 0, 1, 1, 2, 4, 4, 7))], ids=["sequence", "tree"])
def test_compiled_engine_is_token_identical_to_plain(target, shape):
    drafter = RecycleDrafter() if shape else NgramDrafter(3)
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=drafter, gamma=0 if shape else 4, tree=shape,
                               runtime=COMPILED)
    assert engine.target.compiled
    for prompt in PROMPTS:
        assert list(engine.generate(prompt, 24, SamplingConfig()).token_ids) == reference_greedy(target, prompt, 24)


def test_compiled_steps_keep_a_heads_features_aligned(target):
    """Compiled forwards return the hidden states too: after extend, keep and rewind the
    session's features equal a fresh forward's, and the steps did run compiled."""
    from tests.runtime.test_head_drafter import true_features

    session = ModelSession(target, CPU, cache="static", compiled=True)
    session.keep_features = True
    session.extend([1, 5, 9, 5, 9])  # the prefill allocates the buffers eagerly
    calls = session.step.calls
    session.extend([3, 4])
    past = len(session.cached)
    tree = DraftTree((-1, 0, 0, 1, 2), torch.tensor([9, 12, 13, 14, 15]))
    session.extend(tree.token_list, tree=tree)
    session.keep(past, [0, 2, 4])
    assert session.step.calls == calls + 2
    torch.testing.assert_close(session.features, true_features(target, session.cached), atol=1e-4, rtol=1e-4)
    session.rewind_to([1, 5, 9, 5, 9, 3, 8])
    session.extend([8])
    assert len(session.features) == len(session.cached) == 7
    torch.testing.assert_close(session.features, true_features(target, session.cached), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("shape", [dict(gamma=4), dict(tree=StageShape("tree", budget=10, depth=4, dynamic=True)),
                                   dict(tree=StageShape("tree", parents=(-1, 0, 0, 0, 1, 1)), graft=2)],
                         ids=["chain", "dynamic-tree", "static-tree-grafted"])
def test_a_head_over_a_compiled_verifier_drafts_exactly_and_is_greedy_identical(target, shape, monkeypatch):
    from specplan.runtime.drafters.graft import GraftDrafter
    from specplan.runtime.drafters.ngram_tree import NgramTreeDrafter
    from tests.runtime.test_head_drafter import CheckedHead, tiny_head

    shape = dict(shape)
    drafter = CheckedHead("head", tiny_head(target), CPU)
    if "graft" in shape:  # a plan's head tree with ngram tokens grafted in (Graft, arXiv 2605.20104)
        drafter = GraftDrafter(drafter, NgramTreeDrafter(2), shape.pop("graft"))
    engine = SpeculativeEngine(target, CPU, set(), drafter, runtime=COMPILED, **shape)
    assert engine.target.compiled
    before = CheckedHead.checked
    for prompt in PROMPTS:
        assert list(engine.generate(prompt, 20, SamplingConfig()).token_ids) == reference_greedy(target, prompt, 20)
    assert engine.target.step.calls > 0
    if "gamma" in shape:
        assert CheckedHead.checked > before  # chain proposals were compared with a from-scratch head
