"""The preallocated KV cache against the dynamic one (tiny random Llamas, float32).

Logits of every session operation (prefill, chain, tree, keep-accepted, rollback, growth) must
match the dynamic cache's, and whole engines (sequences and trees, model and layer-skip
drafters) must stay token-identical to plain greedy decoding in the ``static`` runtime.
"""

from __future__ import annotations

import pytest
import torch

from specplan.core.plan import StageShape
from specplan.core.errors import SpecplanError
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import SpeculativeEngine
from specplan.core.runtime_modes import RuntimeMode, runtime_from_environment
from specplan.runtime.session import ModelSession
from specplan.runtime.compile.static_cache import StaticKVCache
from specplan.runtime.tree import DraftTree
from tests.runtime.test_engine import PROMPTS, drafters, reference_greedy
from tests.runtime.test_tree_engine import make_drafter
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")
STATIC = RuntimeMode("static")
PARENTS = (-1, 0, 0, 0, 1, 1, 2, 4, 6)
PREFIX = list(range(3, 40))

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return tiny_llama("sdpa", seed=0)


def script(session: ModelSession, kept=(0, 2, 6, 8)) -> list[torch.Tensor]:
    """Every session operation once; returns the logits of each forward."""
    tree = DraftTree(PARENTS, torch.tensor([5, 6, 7, 8, 9, 10, 11, 12, 13]))
    out = [session.extend(PREFIX)]
    past = len(session.cached)
    out.append(session.extend(tree.token_list, tree=tree))
    session.keep(past, kept)
    out.append(session.extend([3]))
    out.append(session.extend([4, 5, 6]))
    out.append(session.extend(session.rewind_to(PREFIX[:20] + [1, 2])))  # rollback, then the new suffix
    out.append(session.extend([7, 8]))
    return out


def assert_same_logits(first: list[torch.Tensor], second: list[torch.Tensor]) -> None:
    for index, (a, b) in enumerate(zip(first, second, strict=True)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"forward {index}")
        assert torch.equal(a.argmax(-1), b.argmax(-1)), f"forward {index}: argmax differs"


@pytest.mark.parametrize("kept", [(0, 2, 6, 8), (0, 1, 4, 7), (0, 3), (0,)])
def test_static_session_gives_the_dynamic_logits(model, kept):
    reference = script(ModelSession(model, CPU, cache="dynamic"), kept)
    session = ModelSession(model, CPU, cache="static", max_length=128)
    assert_same_logits(reference, script(session, kept))
    assert session.cache.length == len(session.cached)


def test_a_small_cache_grows_and_keeps_its_rows(model):
    reference = script(ModelSession(model, CPU, cache="dynamic"))
    session = ModelSession(model, CPU, cache="static", max_length=8)
    assert_same_logits(reference, script(session))
    assert session.cache.capacity == 64  # 8 doubled until the 37-token prefill and the tree fit


def test_steps_never_reallocate_the_buffers(model):
    session = ModelSession(model, CPU, cache="static", max_length=128)
    script(session)
    pointers = [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in session.cache.layers]
    session.reset()
    script(session)
    assert [(layer.keys.data_ptr(), layer.values.data_ptr()) for layer in session.cache.layers] == pointers


def test_keep_gathers_the_accepted_rows_into_place(model):
    session = ModelSession(model, CPU, cache="static", max_length=128)
    session.extend(PREFIX)
    tree = DraftTree(PARENTS, torch.tensor([5, 6, 7, 8, 9, 10, 11, 12, 13]))
    past = len(session.cached)
    session.extend(tree.token_list, tree=tree)
    before = [layer.keys.clone() for layer in session.cache.layers]
    session.keep(past, (0, 2, 6, 8))
    for layer, old in zip(session.cache.layers, before):
        torch.testing.assert_close(layer.keys[:, :, past:past + 4], old[:, :, [past, past + 2, past + 6, past + 8]])
        torch.testing.assert_close(layer.keys[:, :, :past], old[:, :, :past])
    assert session.cached[past:] == [5, 7, 11, 13]


def test_a_keep_that_only_moves_the_pointer_is_caught(model, monkeypatch):
    """The logits comparison can fail: skipping the gather breaks the next forward."""
    reference = script(ModelSession(model, CPU, cache="dynamic"))
    monkeypatch.setattr(StaticKVCache, "keep_nodes", lambda self, past, nodes: self.trim(past + len(nodes)))
    broken = script(ModelSession(model, CPU, cache="static", max_length=128))
    with pytest.raises(AssertionError):
        assert_same_logits(reference, broken)


def test_rollback_below_zero_or_past_the_end_is_refused():
    cache = StaticKVCache(2, CPU, capacity=16)
    with pytest.raises(ValueError):
        cache.trim(1)
    with pytest.raises(ValueError):
        cache.begin(4, kv_length=2)


@pytest.mark.parametrize("name", ["ngram", "layerskip", "model"])
def test_sequence_engine_is_token_identical_with_the_static_cache(name):
    target = tiny_llama("sdpa", seed=0)
    drafter = drafters(target, STATIC)[name]
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=drafter, gamma=4, runtime=STATIC)
    assert engine.target.cache_kind == "static"
    assert name == "ngram" or drafter.session.cache_kind == "static"
    for prompt in PROMPTS:
        assert list(engine.generate(prompt, 24, SamplingConfig()).token_ids) == reference_greedy(target, prompt, 24)


@pytest.mark.parametrize("shape", [StageShape("tree", parents=(-1, 0, 0, 0, 1, 1, 2, 4, 4, 7)), StageShape("tree", budget=10, depth=4, dynamic=True)],
                         ids=["static", "dynamic"])
@pytest.mark.parametrize("name", ["model", "layerskip", "recycle"])
def test_tree_engine_is_token_identical_with_the_static_cache(name, shape):
    target = tiny_llama("sdpa", seed=0)
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=make_drafter(name, target, STATIC), tree=shape,
                               runtime=STATIC)
    assert engine.target.cache_kind == "static"
    for prompt in PROMPTS:
        assert list(engine.generate(prompt, 24, SamplingConfig()).token_ids) == reference_greedy(target, prompt, 24)


def test_the_command_line_maps_the_environment_onto_a_runtime_mode(monkeypatch):
    monkeypatch.delenv("SPECPLAN_RUNTIME", raising=False)
    eager = runtime_from_environment()
    assert eager.session_options() == {"cache": "dynamic", "compiled": False} and eager.profile_label == "eager"
    monkeypatch.setenv("SPECPLAN_RUNTIME", "compiled")
    compiled = runtime_from_environment()
    assert compiled.session_options() == {"cache": "static", "compiled": True} and compiled.profile_label == "compiled"
    assert runtime_from_environment("static").name == "static"  # --runtime wins over the variable
    monkeypatch.setenv("SPECPLAN_RUNTIME", "fast")
    with pytest.raises(SpecplanError, match="SPECPLAN_RUNTIME"):
        runtime_from_environment()
    with pytest.raises(SpecplanError, match="not a runtime"):
        RuntimeMode("fast")


def test_the_runtime_never_reads_the_environment(monkeypatch):
    """Below the command line the mode is a value: the variable alone changes no session."""
    monkeypatch.setenv("SPECPLAN_RUNTIME", "compiled")
    assert ModelSession(tiny_llama("sdpa", seed=0), CPU).cache_kind == "dynamic"
    assert ModelSession(tiny_llama("sdpa", seed=0), CPU, runtime=STATIC).cache_kind == "static"
