"""Hierarchies (drafter -> middle model -> ... -> target) on tiny random Llamas: lossless
greedy and sampling through the whole chain, rollback, per-stage totals, plans."""

from __future__ import annotations

import pytest
import torch

from specplan.core.errors import PlanError
from specplan.core.plan import Plan, Prediction, Stage, StageShape
from specplan.runtime.build import build_engine
from specplan.runtime.drafters.base import Drafter, Proposal, SamplingConfig
from specplan.runtime.drafters.hierarchy import HierarchyDrafter
from specplan.runtime.drafters.model_tree import ModelTreeDrafter
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.session import ModelSession
from specplan.runtime.stage import StageRunner
from tests.runtime.test_engine import PROMPTS, reference_greedy
from tests.runtime.test_tree_engine import (
    DYNAMIC, PROMPT, STATIC, chi_square_pvalue, make_drafter, near_llama, third_token_distribution, third_tokens,
    tiny_loaded, tiny_profile,
)
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")

pytestmark = pytest.mark.usefixtures("one_thread")


def middle(model, drafter, name="middle", **shape) -> HierarchyDrafter:
    """A middle model ``model`` verifying ``drafter`` with ``shape`` (gamma=... or tree=...)."""
    return HierarchyDrafter(name, StageRunner(ModelSession(model, CPU), drafter, names=(drafter.name, name), **shape))


def three_levels(target, bottom: str = "near", shape=DYNAMIC, gamma: int = 3) -> SpeculativeEngine:
    """tree (``bottom``) -> a middle model near the target -> target (sequence of ``gamma``)."""
    drafter = middle(near_llama(), make_drafter(bottom, target), tree=shape)
    return SpeculativeEngine(target, CPU, set(), drafter, gamma=gamma, names=("middle", "target"))


@pytest.mark.parametrize("bottom, shape", [("near", DYNAMIC), ("near", STATIC), ("ngram", DYNAMIC),
                                           ("recycle", DYNAMIC), ("graft-recycle", DYNAMIC)],
                         ids=["model-dynamic", "model-static", "ngram", "recycle", "graft"])
@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_three_level_output_is_token_identical_to_plain(bottom, shape, gamma):
    target = tiny_llama("sdpa", seed=0)
    engine = three_levels(target, bottom, shape, gamma)
    for prompt in PROMPTS:
        result = engine.generate(prompt, 24, SamplingConfig())
        assert list(result.token_ids) == reference_greedy(target, prompt, 24)
        assert sum(result.committed_per_forward) == 24
        bottom_stats, top_stats = result.stages
        assert (bottom_stats.verifier, top_stats.drafter, top_stats.verifier) == ("middle", "middle", "target")
        assert top_stats.verify_forwards == result.target_forwards
        # each target round asked the middle for min(gamma, tokens left - 1) and got exactly that
        produced, requested = 0, 0
        for chunk in result.committed_per_forward:
            requested += min(gamma, 24 - produced - 1)
            produced += chunk
        assert bottom_stats.committed == requested


def test_greedy_four_level_chain_is_token_identical_and_reports_every_stage():
    target = tiny_llama("sdpa", seed=0)
    lowest = middle(tiny_llama("sdpa", seed=1), NgramDrafter(3), name="small", gamma=2)
    upper = middle(near_llama(), lowest, name="near", gamma=3)
    engine = SpeculativeEngine(target, CPU, set(), upper, gamma=4, names=("near", "target"))
    for prompt in PROMPTS:
        result = engine.generate(prompt, 20, SamplingConfig())
        assert list(result.token_ids) == reference_greedy(target, prompt, 20)
    assert [(s.drafter, s.verifier) for s in result.stages] == [("ngram-3", "small"), ("small", "near"), ("near", "target")]


def test_a_middle_equal_to_the_target_is_accepted_in_full():
    target = tiny_llama("sdpa", seed=0)
    perfect = middle(tiny_llama("sdpa", seed=0), make_drafter("near", target), tree=DYNAMIC)
    engine = SpeculativeEngine(target, CPU, set(), perfect, gamma=4)
    result = engine.generate(PROMPTS[0], 25, SamplingConfig())
    assert result.committed_per_forward == (5, 5, 5, 5, 5)  # gamma 4 + the bonus, every target forward


@pytest.mark.parametrize("bottom, folds", [("ngram", True), ("near", True), ("recycle", False)])
def test_a_middle_folds_its_catch_up_into_the_next_verify_forward(bottom, folds):
    """When the target accepts the whole draft, the middle lacks its last draft token; it joins
    the middle's next verify forward (no forward of its own) unless the drafter below learns
    from the middle's forwards (Token Recycling) and must see them in order."""
    target = tiny_llama("sdpa", seed=0)
    perfect = middle(tiny_llama("sdpa", seed=0), make_drafter(bottom, target), tree=DYNAMIC)
    engine = SpeculativeEngine(target, CPU, set(), perfect, gamma=4)
    prompt = PROMPTS[2]  # 11 tokens: more than FOLD_LIMIT missing, so the prefill runs alone
    result = engine.generate(prompt, 25, SamplingConfig())
    assert list(result.token_ids) == reference_greedy(target, prompt, 25)
    assert result.committed_per_forward == (5, 5, 5, 5, 5)
    middle_rounds = result.stages[0].verify_forwards
    catch_ups = len(result.committed_per_forward) - 1  # every round but the last was accepted in full
    forwards = perfect.stage.verifier.forwards  # the prompt's prefill, then its rounds
    assert forwards == 1 + middle_rounds + (0 if folds else catch_ups)


def test_hierarchy_state_rolls_back_between_runs():
    target = tiny_llama("sdpa", seed=0)
    engine = three_levels(target, "recycle")
    first = engine.generate(PROMPTS[1], 20, SamplingConfig())
    engine.generate(PROMPTS[2], 20, SamplingConfig())
    again = engine.generate(PROMPTS[1], 20, SamplingConfig())
    assert (again.token_ids, again.committed_per_forward) == (first.token_ids, first.committed_per_forward)
    assert again.stages[0].verify_forwards == first.stages[0].verify_forwards  # totals restart per run
    sampled = [engine.generate(PROMPTS[0], 12, SamplingConfig(1.0, 0.9, seed=5)).token_ids for _ in range(2)]
    assert sampled[0] == sampled[1]


def test_a_middle_model_drafts_its_own_samples():
    """The middle's proposal (a sampled tree below it, verified by it) ~ the middle's own marginal."""
    target, near = tiny_llama("sdpa", seed=0), near_llama()
    drafter = middle(near, make_drafter("model", target), tree=DYNAMIC)
    draws = [drafter.propose(PROMPT, 3, SamplingConfig(1.0, 1.0, seed=seed),
                             torch.Generator().manual_seed(seed)).tokens[2] for seed in range(1500)]
    assert chi_square_pvalue(draws, third_token_distribution(near, PROMPT)) > 1e-3


@pytest.mark.parametrize("gamma", [1, 2])
def test_sampled_three_level_output_has_the_target_distribution(gamma):
    """Chi-square: the 3rd token through tree -> middle -> target ~ the target's own marginal."""
    target = tiny_llama("sdpa", seed=0)
    engine = three_levels(target, "model", DYNAMIC, gamma)
    assert chi_square_pvalue(third_tokens(engine, 1500), third_token_distribution(target, PROMPT)) > 1e-3


class MisreportsItsDistribution(Drafter):
    """A broken middle: it drafts its own samples but reports a uniform draft distribution.

    (Reporting them as deterministic would not do: point-mass verification is lossless
    whatever the token; it only lowers acceptance.)
    """

    def __init__(self, drafter):
        self.drafter, self.name = drafter, "broken"

    def reset(self):
        self.drafter.reset()

    def propose(self, committed, gamma, sampling, generator):
        proposal = self.drafter.propose(committed, gamma, sampling, generator)
        return Proposal(proposal.tokens, torch.full_like(proposal.draft_probs, 1.0 / proposal.draft_probs.shape[-1]))


def test_the_chi_square_test_catches_a_middle_that_misreports_its_distribution():
    target = tiny_llama("sdpa", seed=0)
    broken = MisreportsItsDistribution(middle(near_llama(), make_drafter("model", target), tree=DYNAMIC))
    engine = SpeculativeEngine(target, CPU, set(), broken, gamma=2)
    assert chi_square_pvalue(third_tokens(engine, 1500), third_token_distribution(target, PROMPT)) < 1e-3


def hierarchy_plan(*stages: Stage) -> Plan:
    return Plan("profile.yaml", "", {"kind": "cpu", "sku": "cpu"}, "target", 0.0, stages, Prediction(1.0, 1.0, 1.0, 1.0))


@pytest.mark.parametrize("bottom", [StageShape("tree", budget=6, depth=3, dynamic=True), StageShape("sequence", gamma=3)],
                         ids=["tree", "sequence"])
def test_build_engine_runs_multi_stage_plans(bottom):
    target = tiny_llama("sdpa", seed=0)
    plan = hierarchy_plan(Stage("recycle", "layerskip-1", bottom),
                          Stage("layerskip-1", "target", StageShape("sequence", gamma=2)))
    engine = build_engine(plan, tiny_profile(), tiny_loaded(target), CPU)
    result = engine.generate(PROMPTS[2], 16, SamplingConfig())
    assert list(result.token_ids) == reference_greedy(target, PROMPTS[2], 16)
    assert [(s.drafter, s.verifier) for s in result.stages] == [("recycle", "layerskip-1"), ("layerskip-1", "target")]


@pytest.mark.parametrize("stages, message", [
    ((Stage("ngram-3", "layerskip-1", StageShape("sequence", gamma=2)), Stage("recycle", "target", StageShape("sequence", gamma=2))),
     "must draft the next stage"),
    ((Stage("ngram-3", "layerskip-1", StageShape("sequence", gamma=2)),
      Stage("layerskip-1", "target", StageShape("tree", budget=4, depth=2, dynamic=True))), "only the bottom stage"),
    ((Stage("ngram-3", "recycle", StageShape("sequence", gamma=2)), Stage("recycle", "target", StageShape("sequence", gamma=2))),
     "retrieval drafter"),
], ids=["broken-chain", "tree-on-top", "retrieval-verifier"])
def test_malformed_hierarchies_are_plan_errors(stages, message):
    with pytest.raises(PlanError, match=message) as caught:
        build_engine(hierarchy_plan(*stages), tiny_profile(), tiny_loaded(tiny_llama("sdpa", seed=0)), CPU)
    assert len(str(caught.value).splitlines()) == 1


def test_a_layer_skip_middle_keeps_tree_paths_in_its_partial_cache():
    """A layer-skip middle's cache has layers it never runs; keeping a non-prefix tree path must skip them."""
    from specplan.runtime.drafters.layerskip import layer_skip_view, parse_kept_layers

    target = tiny_llama("sdpa", seed=0)
    view = layer_skip_view(target, parse_kept_layers("1", 2))
    same = ModelTreeDrafter("same", layer_skip_view(target, parse_kept_layers("1", 2)), CPU)  # always accepted
    drafter = middle(view, same, tree=STATIC)  # so the kept path 0 -> 1 -> 4 -> 7 is not a prefix
    engine = SpeculativeEngine(target, CPU, set(), drafter, gamma=3)
    for prompt in PROMPTS:
        assert list(engine.generate(prompt, 24, SamplingConfig()).token_ids) == reference_greedy(target, prompt, 24)
