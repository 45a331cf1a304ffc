"""The runtime's backend objects (runtime/backends/): one per name, carrying that name's traits, and what
they answer without a model loaded."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specplan.core.backends import BACKEND_NAMES, traits
from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.errors import DrafterSpecError, SpecplanError
from specplan.runtime.backends import Backend, backend_for
from specplan.runtime.backends.llama_cpp_backend import LLAMA_CPP_CONTEXT


def test_each_name_has_an_object_with_its_traits():
    for name in BACKEND_NAMES:
        backend = backend_for(name)
        assert isinstance(backend, Backend) and backend.name == name and backend.traits is traits(name)
    with pytest.raises(SpecplanError, match="^'vllm' is not a backend; use one of torch, llama.cpp$"):
        backend_for("vllm")


def test_llama_cpp_shares_one_context_and_refuses_torch_drafters_in_one_line():
    llama_cpp = backend_for("llama.cpp")
    assert llama_cpp.shares_target_session and llama_cpp.reuses_graph_per_shape and not llama_cpp.compiles_graphs
    assert llama_cpp.context(SimpleNamespace()) == LLAMA_CPP_CONTEXT
    assert llama_cpp.threads_used(SimpleNamespace(threads=3)) == 3
    with pytest.raises(DrafterSpecError, match="needs the torch backend"):
        llama_cpp.drafter_network(parse_drafter_spec("layerskip:4"), SimpleNamespace(), None)
    with pytest.raises(DrafterSpecError, match="hidden states"):
        llama_cpp.head_network(parse_drafter_spec("head:heads/small"), SimpleNamespace(), None)


def test_torch_runs_transformers_weights_in_sessions_of_its_own():
    torch_backend = backend_for("torch")
    assert torch_backend.runs_transformers_weights and torch_backend.compiles_graphs
    assert not (torch_backend.shares_target_session or torch_backend.reuses_graph_per_shape)
    assert torch_backend.rounding_note == "" and torch_backend.profile_note == ""
    target = SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(max_position_embeddings=2048)))
    assert torch_backend.target_network(target, None) is target.model and torch_backend.context(target) == 2048
    assert torch_backend.for_plan(target, None, None) is target
