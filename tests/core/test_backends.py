"""Each backend's traits (core/backends.py): the rows the planner, the core types and the command line
read instead of comparing a backend's name, one line for a name that is none."""

from __future__ import annotations

import pytest

from specplan.core.backends import BACKEND_NAMES, LLAMA_CPP, TORCH, traits, traits_of_source
from specplan.core.drafter_spec import KINDS, RETRIEVAL_KINDS, parse_drafter_spec
from specplan.core.errors import SpecplanError
from specplan.core.profile import DeviceInfo, Profile


def test_each_known_name_has_its_row():
    assert BACKEND_NAMES == ("torch", "llama.cpp")
    assert [traits(name) for name in BACKEND_NAMES] == [TORCH, LLAMA_CPP]
    assert all(traits(name).name == name for name in BACKEND_NAMES)


def test_torch_runs_every_kind_batched_and_takes_no_kernel_settings():
    assert TORCH.tree_kinds == KINDS and TORCH.grows_trees("layerskip")
    assert TORCH.batched_runs and not (TORCH.kernel_settings or TORCH.derives_batch_curves)
    assert TORCH.engine_floor == "" and TORCH.profile_widths == (1, 2, 4, 8, 16, 32, 64)


def test_llama_cpp_grows_retrieval_trees_and_is_its_own_floor():
    assert LLAMA_CPP.tree_kinds == RETRIEVAL_KINDS and not LLAMA_CPP.grows_trees("model")
    assert LLAMA_CPP.kernel_settings and LLAMA_CPP.derives_batch_curves
    assert not LLAMA_CPP.batched_runs and LLAMA_CPP.engine_floor == "llama.cpp's own plain decoding"
    assert set(TORCH.profile_widths) < set(LLAMA_CPP.profile_widths)  # measured densely


def test_default_drafters_are_specs_their_backend_runs():
    for backend in (TORCH, LLAMA_CPP):
        kinds = {parse_drafter_spec(source).kind for source in backend.default_drafters}
        assert kinds <= set(KINDS)
    assert {parse_drafter_spec(source).kind for source in LLAMA_CPP.default_drafters} <= set(RETRIEVAL_KINDS)


@pytest.mark.parametrize("name", ["vllm", "Torch", "llama-cpp", ""])
def test_an_unknown_name_is_one_line(name):
    with pytest.raises(SpecplanError, match=rf"^'{name}' is not a backend; use one of torch, llama.cpp$"):
        traits(name)


@pytest.mark.parametrize("source, name", [("llama.cpp", "llama.cpp"), ("measured", "torch"), ("roofline", "torch"),
                                          ("engine:llama.cpp", "torch")])
def test_a_profile_names_its_backend_by_its_source(source, name):
    assert traits_of_source(source).name == name
    profile = Profile(DeviceInfo("cpu", "cpu", "cpu", source=source), (), ())
    assert profile.backend == name and profile.backend_traits is traits(name)
