"""A llama.cpp session holds a sequence id per draft-tree path: every plan's widest tree gets as many as
it needs (not the default 64), and a tree beyond what one context holds is refused before any work."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specplan.core.errors import PlanError
from specplan.core.plan import Plan, Prediction, Stage, StageShape
from specplan.core.plan_adaptive import AdaptiveCandidate, AdaptiveSettings
from specplan.runtime.backends.llama_cpp_backend import TREE_PATHS, llama_cpp_tree_paths


def star(leaves: int) -> StageShape:
    return StageShape(kind="tree", parents=(-1,) + (0,) * leaves)


def plan_of(*shapes: StageShape) -> Plan:
    stages = tuple(Stage("ngram-3", "target", shape) for shape in shapes)
    return Plan("profile.yaml", "sha256:0", {"kind": "cpu", "sku": "cpu"}, "target", 0.0, stages,
                Prediction(10.0, 100.0, 1.0, 1.0))


def test_the_widest_tree_of_any_configuration_sets_the_paths():
    chain_and_tree = plan_of(StageShape(kind="sequence", gamma=5), star(3))
    assert chain_and_tree.most_tree_paths() == 3 and plan_of().most_tree_paths() == 1
    adaptive = AdaptiveSettings(candidates=(AdaptiveCandidate(plan_of(star(90)).stages, 9.0),))
    assert llama_cpp_tree_paths(replace(chain_and_tree, adaptive=adaptive)) == 90


def test_a_tree_beyond_one_context_is_refused_in_one_line():
    assert llama_cpp_tree_paths(plan_of(star(254))) == 254
    with pytest.raises(PlanError, match=r"255 root-to-leaf paths.*holds 254: re-plan with a smaller --max-budget"):
        llama_cpp_tree_paths(plan_of(star(255)))


def test_a_session_gets_the_paths_its_plan_needs():
    pytest.importorskip("llama_cpp")
    from specplan.models.load import default_gguf_path, load_gguf_model
    from specplan.runtime.backends.llama_cpp_backend import llama_cpp_session

    target = load_gguf_model(str(default_gguf_path()), 1, exact=False)
    for needed, held in ((0, TREE_PATHS), (100, 100)):
        with llama_cpp_session(target.path, replace(target, tree_paths=needed), exact=False) as session:
            assert session.max_tree_paths == held
