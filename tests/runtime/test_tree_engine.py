"""Tree stages end to end on tiny random Llamas: lossless greedy and sampling, rollback, plans."""

from __future__ import annotations

import collections
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats

from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.core.errors import PlanError, TreeError
from specplan.core.plan import Plan, Prediction, Stage, StageShape, plan_from_dict, plan_to_dict
from specplan.core.profile import DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry
from specplan.runtime.build import build_engine
from specplan.runtime.drafters.base import Drafter, SamplingConfig
from specplan.runtime.drafters.cacheback import CacheDrafter
from specplan.runtime.drafters.graft import GraftDrafter
from specplan.runtime.drafters.layerskip import layer_skip_view, parse_kept_layers
from specplan.runtime.drafters.model_tree import ModelTreeDrafter
from specplan.runtime.drafters.ngram_tree import NgramTreeDrafter
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.models.load import LoadedModel
from specplan.runtime.tree import DraftTree
from tests.runtime.test_engine import PROMPTS, reference_greedy
from tests.runtime.tiny_models import TINY_VOCAB, tiny_llama

CPU = torch.device("cpu")
STATIC = StageShape("tree", parents=(-1, 0, 0, 0, 1, 1, 2, 4, 4, 7))  # 10 nodes, depth 4
DYNAMIC = StageShape("tree", budget=10, depth=4, dynamic=True)


pytestmark = pytest.mark.usefixtures("one_thread")


def near_llama():
    """The target with noise on its head: a drafter that agrees often but not always
    (about 1.7 tokens per forward at temperature 1), so rejections happen at every depth."""
    model = tiny_llama("sdpa", seed=0)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        weight = model.lm_head.weight
        weight.add_(weight.std() * torch.randn(weight.shape, generator=generator))
    return model


def make_drafter(name: str, target, runtime: RuntimeMode = EAGER):
    """A tree drafter for ``target`` by name (model drafters' sessions run ``runtime``)."""
    other = lambda: ModelTreeDrafter("model", tiny_llama("sdpa", seed=1), CPU, runtime=runtime)  # noqa: E731
    near = lambda: ModelTreeDrafter("near", near_llama(), CPU, runtime=runtime)  # noqa: E731
    return {
        "model": other,
        "near": near,
        "layerskip": lambda: ModelTreeDrafter("layerskip-1", layer_skip_view(target, parse_kept_layers("1", 2)), CPU,
                                              runtime=runtime),
        "self": lambda: ModelTreeDrafter("self", tiny_llama("sdpa", seed=0), CPU, runtime=runtime),  # always accepted
        "ngram": lambda: NgramTreeDrafter(3),
        "recycle": lambda: RecycleDrafter(),
        "cache": lambda: CacheDrafter(),
        "graft-ngram": lambda: GraftDrafter(other(), NgramTreeDrafter(3), 3),
        "graft-near": lambda: GraftDrafter(near(), NgramTreeDrafter(3), 3),
        "graft-recycle": lambda: GraftDrafter(other(), RecycleDrafter(), 4),
    }[name]()


@pytest.mark.parametrize("shape", [STATIC, DYNAMIC], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", ["model", "layerskip", "self", "ngram", "recycle", "cache", "graft-ngram", "graft-recycle"])
def test_greedy_tree_output_is_token_identical_to_plain(name, shape):
    target = tiny_llama("sdpa", seed=0)
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=make_drafter(name, target), tree=shape)
    forwards = 0
    for prompt in PROMPTS:
        result = engine.generate(prompt, 24, SamplingConfig())
        assert list(result.token_ids) == reference_greedy(target, prompt, 24)
        assert sum(result.committed_per_forward) == 24 == len(result.token_ids)
        forwards += result.target_forwards
    if name in ("self", "recycle", "graft-recycle"):
        assert forwards < 3 * 24  # the tree was used: some forward committed more than its bonus


def test_a_perfect_drafter_fills_the_static_tree():
    target = tiny_llama("sdpa", seed=0)
    engine = SpeculativeEngine(target, CPU, set(), make_drafter("self", target), tree=STATIC)
    result = engine.generate(PROMPTS[0], 25, SamplingConfig())
    assert result.committed_per_forward == (5, 5, 5, 5, 5)  # depth 4 + the bonus, every forward


@pytest.mark.parametrize("name", ["model", "recycle", "cache", "graft-recycle"])
def test_drafter_state_rolls_back_between_runs(name):
    """A run after other runs is identical, forward by forward (no stale drafter cache or table)."""
    target = tiny_llama("sdpa", seed=0)
    engine = SpeculativeEngine(target, CPU, set(), make_drafter(name, target), tree=DYNAMIC)
    first = engine.generate(PROMPTS[1], 20, SamplingConfig())
    engine.generate(PROMPTS[2], 20, SamplingConfig())
    again = engine.generate(PROMPTS[1], 20, SamplingConfig())
    assert (again.token_ids, again.committed_per_forward) == (first.token_ids, first.committed_per_forward)
    sampled = [engine.generate(PROMPTS[0], 12, SamplingConfig(1.0, 0.9, seed=5)).token_ids for _ in range(2)]
    assert sampled[0] == sampled[1]


def third_token_distribution(target, prompt: list[int]) -> np.ndarray:
    """Exact marginal [vocab] of the third generated token at temperature 1."""
    with torch.no_grad():
        first = torch.softmax(target(torch.tensor([prompt])).logits[0, -1], -1).double()  # [V]
        pairs = torch.tensor([prompt + [a] for a in range(TINY_VOCAB)])
        second = torch.softmax(target(pairs).logits[:, -1], -1).double()  # [V, V]
        triples = torch.tensor([prompt + [a, b] for a in range(TINY_VOCAB) for b in range(TINY_VOCAB)])
        third = torch.softmax(target(triples).logits[:, -1], -1).double()  # [V * V, V]
    weights = (first[:, None] * second).reshape(-1)  # [V * V]
    return (weights[:, None] * third).sum(0).numpy()


def chi_square_pvalue(draws: list[int], expected: np.ndarray) -> float:
    """Pearson's test of ``draws`` against ``expected``, with the improbable tail pooled."""
    counts = collections.Counter(draws)
    order = np.argsort(-expected)
    observed = np.array([counts.get(int(token), 0) for token in order], dtype=float)
    wanted = expected[order] * len(draws)
    keep = np.cumsum(wanted) <= len(draws) * 0.97  # every kept bin expects >= ~5
    observed = np.append(observed[keep], observed[~keep].sum())
    wanted = np.append(wanted[keep], wanted[~keep].sum())
    return stats.chisquare(observed, wanted * observed.sum() / wanted.sum()).pvalue


class MisreportsItsDraft(Drafter):
    """A broken drafter: it samples from its own distribution but reports a uniform one.

    (Passing sampled children off as deterministic would not do: verifying a point mass is
    lossless whatever the token, so that only lowers acceptance.)
    """

    def __init__(self, drafter):
        self.drafter, self.name = drafter, "broken"

    def reset(self):
        self.drafter.reset()

    def propose_tree(self, committed, shape, sampling, generator):
        tree = self.drafter.propose_tree(committed, shape, sampling, generator)
        uniform = torch.full_like(tree.draft_probs, 1.0 / tree.draft_probs.shape[-1])  # [num_nodes, vocab]
        return DraftTree(tree.parents, tree.tokens, uniform, tree.sampled)


PROMPT = [5, 9, 5, 9, 5, 9, 5]


def third_tokens(engine, draws: int) -> list[int]:
    return [engine.generate(PROMPT, 3, SamplingConfig(1.0, 1.0, seed=seed)).token_ids[2] for seed in range(draws)]


@pytest.mark.parametrize("name, shape", [("near", STATIC), ("near", DYNAMIC), ("graft-near", DYNAMIC)],
                         ids=["static", "dynamic", "graft"])
def test_sampled_tree_output_has_the_target_distribution(name, shape):
    """Chi-square: the 3rd token (drafted at depth 2 of a tree, or by a bonus) ~ the target's marginal."""
    target = tiny_llama("sdpa", seed=0)
    engine = SpeculativeEngine(target, CPU, set(), make_drafter(name, target), tree=shape)
    assert chi_square_pvalue(third_tokens(engine, 1500), third_token_distribution(target, PROMPT)) > 1e-3


def test_the_chi_square_test_catches_a_drafter_that_misreports_its_draft():
    target = tiny_llama("sdpa", seed=0)
    broken = MisreportsItsDraft(make_drafter("near", target))
    engine = SpeculativeEngine(target, CPU, set(), broken, tree=STATIC)
    assert chi_square_pvalue(third_tokens(engine, 1500), third_token_distribution(target, PROMPT)) < 1e-3


def tiny_loaded(model) -> LoadedModel:
    return LoadedModel("tiny", "", model, SimpleNamespace(eos_token_id=None), "", "float32")


def tiny_profile() -> Profile:
    curve = (LatencyCurve(64, (1, 8), (1.0, 1.2)),)
    return Profile(
        device=DeviceInfo("cpu", "test", "cpu"),
        models=(ModelEntry("target", "tiny", "", role="target", latency=curve),
                ModelEntry("layerskip-1", "layerskip:1", "", base="target", latency=curve)),
        acceptance=(),
        retrieval=(RetrievalEntry("ngram-3", "ngram:3", 0.01), RetrievalEntry("recycle", "recycle", 0.01),
                   RetrievalEntry("cache", "cache", 0.01)),
    )


def tree_plan(drafter: str, shape: StageShape) -> Plan:
    return Plan("profile.yaml", "", {"kind": "cpu", "sku": "cpu"}, "target", 0.0,
                (Stage(drafter, "target", shape),), Prediction(1.0, 1.0, 1.0, 1.0))


@pytest.mark.parametrize("drafter, shape", [
    ("layerskip-1", StageShape("tree", parents=(-1, 0, 0, 1, 1, 3))),
    ("layerskip-1", StageShape("tree", budget=8, depth=3, dynamic=True)),
    ("recycle", StageShape("tree", budget=8, depth=3, dynamic=True)),
    ("cache", StageShape("tree", parents=(-1, 0, 1, 0))),
    ("layerskip-1", StageShape("tree", budget=8, depth=3, dynamic=True, graft="recycle", graft_budget=3)),
    ("recycle", StageShape("sequence", gamma=3)),
], ids=["static", "dynamic", "recycle", "cache", "graft", "recycle-sequence"])
def test_build_engine_runs_single_stage_tree_plans(drafter, shape):
    target = tiny_llama("sdpa", seed=0)
    plan = tree_plan(drafter, shape)
    assert plan_from_dict(plan_to_dict(plan)) == plan
    engine = build_engine(plan, tiny_profile(), tiny_loaded(target), CPU)
    result = engine.generate(PROMPTS[2], 16, SamplingConfig())
    assert list(result.token_ids) == reference_greedy(target, PROMPTS[2], 16)


@pytest.mark.parametrize("make, error", [
    (lambda: StageShape("tree", budget=0, depth=3, dynamic=True), PlanError),
    (lambda: StageShape("tree", budget=4, depth=0, dynamic=True), PlanError),
    (lambda: StageShape("tree", parents=(-1, 2, 0)), PlanError),
    (lambda: StageShape("tree", parents=(0, 0)), PlanError),
    (lambda: StageShape("tree", budget=0, depth=3), PlanError),
    (lambda: StageShape("tree", parents=(-1, 1)), PlanError),
    (lambda: StageShape("tree", budget=4, depth=2, graft="recycle", graft_budget=4), PlanError),
    (lambda: StageShape("sequence", gamma=3, graft="recycle", graft_budget=1), PlanError),
    (lambda: GraftDrafter(None, None, 0), TreeError),
], ids=["budget-0", "depth-0", "parent-after-child", "no-root", "plan-budget-0", "plan-cycle", "graft-too-big",
        "graft-on-sequence", "graft-budget-0"])
def test_bad_tree_shapes_are_rejected_in_one_line(make, error):
    with pytest.raises(error) as caught:
        make()
    assert len(str(caught.value).splitlines()) == 1


def test_graft_into_a_retrieval_drafter_is_a_plan_error():
    plan = tree_plan("recycle", StageShape("tree", budget=8, depth=3, dynamic=True, graft="ngram-3", graft_budget=2))
    with pytest.raises(PlanError, match="graft"):
        build_engine(plan, tiny_profile(), tiny_loaded(tiny_llama("sdpa", seed=0)), CPU)
