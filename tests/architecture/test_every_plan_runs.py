"""Every plan the solver can emit runs on its profile's backend.

For each backend, a profile holding every drafter kind the backend loads is solved many ways
(random costs and acceptance); every candidate row (the plan, its alternatives, an adaptive
plan's candidates) must have shapes the runtime builds: trees only from drafters the backend
grows trees from (core/backends.py, ``tree_kinds``). Then, on the llama.cpp backend, each
family the solver emits there (plain; every drafter kind as a sequence; every retrieval kind as a
tree; a model middle stage) is built by the runtime on the default GGUF with a tiny GGUF drafter
and decodes the target's own greedy tokens; a model-grown tree, which the solver no longer emits
there, is refused by the runtime in one line.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import replace

import numpy as np
import pytest

from specplan.core.backends import traits
from specplan.core.drafter_spec import KINDS, parse_drafter_spec
from specplan.core.plan import Plan, Prediction, Stage, StageShape
from specplan.core.profile import AcceptanceEntry, DeviceInfo, ModelEntry, Profile, RetrievalEntry
from specplan.planner.solve import PlanOptions, solve_plan
from specplan.planner.validate import PlannerWarning
from tests.planner.planner_instances import linear_curve

SOURCES = {"torch": ("model:small", "layerskip:2", "head:heads/small", "ngram:3", "recycle", "cache"),
           "llama.cpp": ("model:small.gguf", "ngram:3", "recycle", "cache")}


def every_kind_profile(backend: str, rng: np.random.Generator) -> Profile:
    """A target, a middle model and every drafter kind ``backend`` loads, with random costs and acceptance."""
    models = [ModelEntry("target", "default", "fp", role="target", latency=(linear_curve(float(rng.uniform(20, 60)),
                                                                                        float(rng.uniform(0.05, 2.0))),)),
              ModelEntry("middle", "model:middle", "fp", latency=(linear_curve(float(rng.uniform(5, 15)), 0.3),))]
    retrieval = []
    for source in SOURCES[backend]:
        spec = parse_drafter_spec(source)
        if spec.is_retrieval:
            retrieval.append(RetrievalEntry(spec.id, source, float(rng.uniform(0.01, 0.3))))
        else:
            models.append(ModelEntry(spec.id, source, "fp", latency=(linear_curve(float(rng.uniform(1, 6)), 0.1),)))
    ids = [m.id for m in models] + [r.id for r in retrieval]
    acceptance = []
    for drafter, verifier in itertools.permutations(ids, 2):
        if verifier not in ("target", "middle") or (verifier == "middle" and drafter == "target"):
            continue
        rank = rng.random(4)
        rank = tuple(float(v) for v in rank[:3] / (rank.sum() + 0.2))
        acceptance.append(AcceptanceEntry(drafter, verifier, 0.0, float(rng.uniform(0.3, 0.95)), 8, rank_accept=rank))
    source = "llama.cpp" if backend == "llama.cpp" else "measured"
    return Profile(DeviceInfo("cpu", "test cpu", "cpu", source=source, numerics="fast" if source == "llama.cpp" else ""),
                   tuple(models), tuple(acceptance), tuple(retrieval))


def tree_drafter_kinds(profile: Profile, seeds: range) -> set[str]:
    """The drafter kinds of every tree stage in every candidate the solver lists, over ``seeds``."""
    kinds = set()
    for seed in seeds:
        profile_seed = every_kind_profile(profile.backend, np.random.default_rng(seed))
        with warnings.catch_warnings():  # pairs left unmeasured on purpose are reported, not errors
            warnings.simplefilter("ignore", PlannerWarning)
            result = solve_plan(profile_seed, PlanOptions(max_budget=16, max_depth=4))
        for row in result.candidates:
            for stage in row.stages:
                if stage.shape.kind == "tree":
                    entry = profile_seed.model(stage.drafter) or profile_seed.retrieval_entry(stage.drafter)
                    kinds.add(parse_drafter_spec(entry.source).kind)
    return kinds


@pytest.mark.parametrize("backend", ["torch", "llama.cpp"])
def test_the_solver_grows_trees_only_where_the_backend_does(backend):
    kinds = tree_drafter_kinds(every_kind_profile(backend, np.random.default_rng(0)), range(12))
    assert kinds <= set(traits(backend).tree_kinds)
    assert kinds & {"ngram", "recycle", "cache"}  # retrieval trees are emitted on both backends
    if backend == "torch":  # and model-grown trees where the runtime grows them: the rule is not vacuous
        assert kinds & {"model", "layerskip", "head"}


def test_tree_kinds_are_drafter_kinds():
    assert set(traits("torch").tree_kinds) == set(KINDS) and set(traits("llama.cpp").tree_kinds) < set(KINDS)


# --- the llama.cpp runtime builds and runs every family the solver emits there ---------------------------


@pytest.fixture(scope="module")
def llama_cpp_pair(tmp_path_factory, default_model_dir):
    """The default GGUF as the target and a tiny random GGUF (its tokenizer) as a model drafter."""
    pytest.importorskip("llama_cpp")
    from specplan.models.gguf_write import write_gguf
    from specplan.models.load import load_gguf_model
    from tests.tiny_checkpoint import save_tiny_llama

    folder = save_tiny_llama(tmp_path_factory.mktemp("tiny-drafter"), default_model_dir, hidden_size=32)
    drafter = tmp_path_factory.mktemp("gguf") / "small.gguf"
    write_gguf(folder, drafter)
    return load_gguf_model("default", 1, exact=True), drafter


def llama_cpp_profile(drafter_gguf) -> Profile:
    rng = np.random.default_rng(0)
    base = every_kind_profile("llama.cpp", rng)
    models = tuple(replace(m, source=f"model:{drafter_gguf}") if m.id in ("middle", "model-small") else m
                   for m in base.models)
    return replace(base, models=models)


FAMILIES = [
    (),                                                                          # plain decoding
    (Stage("model-small", "target", StageShape("sequence", gamma=3)),),
    (Stage("ngram-3", "target", StageShape("sequence", gamma=4)),),
    (Stage("recycle", "target", StageShape("sequence", gamma=2)),),
    (Stage("cache", "target", StageShape("sequence", gamma=2)),),
    (Stage("ngram-3", "target", StageShape("tree", parents=(-1, 0, 0, 1))),),
    (Stage("recycle", "target", StageShape("tree", parents=(-1, 0, 0, 1, 2))),),
    (Stage("cache", "target", StageShape("tree", parents=(-1, 0, 1))),),
    (Stage("ngram-3", "middle", StageShape("sequence", gamma=3)),                # a hierarchy: a model middle stage
     Stage("middle", "target", StageShape("sequence", gamma=2))),
]


def plan_of(stages, profile: Profile) -> Plan:
    return Plan("profile.yaml", "", {"kind": "cpu", "sku": "cpu"}, "target", 0.0, tuple(stages),
                Prediction(10.0, 100.0, 1.0, 1.0), (), {})


@pytest.mark.realmodel
@pytest.mark.parametrize("stages", FAMILIES, ids=lambda stages: " / ".join(
    f"{s.drafter}-{s.shape.kind}" for s in stages) or "plain")
def test_every_llama_cpp_family_builds_and_decodes_the_targets_tokens(stages, llama_cpp_pair):
    import torch

    from specplan.runtime.build import build_engine
    from specplan.runtime.drafters.base import SamplingConfig

    target, drafter_gguf = llama_cpp_pair
    profile = llama_cpp_profile(drafter_gguf)
    prompt = target.tokenizer("def fib(n):\n    return", add_special_tokens=False)["input_ids"]
    plain = build_engine(plan_of((), profile), profile, target, torch.device("cpu"))
    expected = plain.generate(prompt, 24, SamplingConfig()).token_ids
    plain.target.close()
    engine = build_engine(plan_of(stages, profile), profile, target, torch.device("cpu"), fallback=False)
    assert engine.generate(prompt, 24, SamplingConfig()).token_ids == expected  # exact numerics: bit-identical
    engine.target.close()


@pytest.mark.realmodel
def test_a_model_grown_tree_is_refused_on_llama_cpp_in_one_line(llama_cpp_pair):
    import torch

    from specplan.core.errors import SpecplanError
    from specplan.runtime.build import build_engine

    target, drafter_gguf = llama_cpp_pair
    profile = llama_cpp_profile(drafter_gguf)
    assert not profile.grows_trees("model-small") and profile.grows_trees("recycle")
    stages = (Stage("model-small", "target", StageShape("tree", parents=(-1, 0, 0))),)
    with pytest.raises(SpecplanError, match="grows trees on the torch backend only"):
        build_engine(plan_of(stages, profile), profile, target, torch.device("cpu"))
