"""Tree drafters: growth rules against references, model trees against full recompute,
retrieval tables, and the graft."""

from __future__ import annotations

import collections
import heapq
import itertools

import numpy as np
import pytest
import torch
from scipy import stats

from specplan.core.plan import StageShape
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.cacheback import CacheDrafter
from specplan.runtime.drafters.graft import GraftDrafter, graft
from specplan.runtime.drafters.model_tree import ModelTreeDrafter, draw_without_replacement
from specplan.runtime.drafters.ngram_tree import NgramTreeDrafter
from specplan.runtime.drafters.recycle import RecycleDrafter
from specplan.runtime.drafters.tree_growth import Children, Growth, grow_best_first, grow_static
from specplan.runtime.sampling import target_probabilities
from specplan.runtime.tree import DraftTree
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")
GREEDY = SamplingConfig()


pytestmark = pytest.mark.usefixtures("one_thread")


def test_draw_without_replacement_matches_sequential_sampling():
    """Ordered pairs (a, b): P = p(a) * p(b) / (1 - p(a)), as drawing one after the other."""
    probs = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05, 0.0])
    generator = torch.Generator().manual_seed(0)
    draws = 4000
    counts = collections.Counter(tuple(draw_without_replacement(probs, 2, generator)) for _ in range(draws))
    pairs = [(a, b) for a in range(5) for b in range(5) if a != b]
    p = probs.double().tolist()
    expected = np.array([p[a] * p[b] / (1 - p[a]) for a, b in pairs]) * draws
    observed = np.array([counts.get(pair, 0) for pair in pairs])
    assert sum(observed) == draws  # never the zero-probability token, never a repeat
    assert stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue > 1e-3
    assert draw_without_replacement(probs, 9, generator).__len__() == 5


def markov_expander(rows: torch.Tensor):
    """Deterministic children: the top tokens of a Markov chain's row for the node's token."""
    def expand(growth, nodes, counts):
        offered = []
        for node, count in zip(nodes, counts):
            top = torch.topk(rows[growth.tokens[node]], count)
            offered.append(Children(tuple(top.indices.tolist()), tuple(top.values.tolist())))
        return offered
    return expand


def heap_reference(rows: torch.Tensor, root: int, budget: int, depth: int, width: int) -> set[tuple[int, ...]]:
    """docs/planner-math.md section 2, literally: pop the best candidate, push its best child and its next sibling."""
    ranked = {token: torch.topk(rows[token], width) for token in range(rows.shape[0])}

    def candidate(path, score, rank):  # the rank-th child of the node at ``path``
        top = ranked[path[-1] if path else root]
        return (-score * float(top.values[rank]), path + (int(top.indices[rank]),), score, rank)

    heap, chosen = [candidate((), 1.0, 0)], set()
    while heap and len(chosen) < budget - 1:
        key, path, parent_score, rank = heapq.heappop(heap)
        chosen.add(path)
        if rank + 1 < width:
            heapq.heappush(heap, candidate(path[:-1], parent_score, rank + 1))
        if len(path) < depth:
            heapq.heappush(heap, candidate(path, -key, 0))
    return chosen


def tree_paths(tree: DraftTree) -> set[tuple[int, ...]]:
    return {tuple(tree.token_list[n] for n in tree.path_to(node)[1:]) for node in range(1, tree.num_nodes)}


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("budget, depth", [(6, 2), (16, 4), (25, 6)])
def test_best_first_growth_equals_the_heap(seed, budget, depth):
    generator = torch.Generator().manual_seed(seed)
    rows = torch.softmax(3 * torch.randn(12, 12, generator=generator), dim=-1)  # [vocab, vocab] a Markov chain
    width = 4
    growth = grow_best_first(markov_expander(rows), 0, budget, depth, width)
    tree = growth.draft_tree()
    assert tree.num_nodes == budget and max(tree.depth) <= depth
    assert tree_paths(tree) == heap_reference(rows, 0, budget, depth, width)
    for node in range(1, tree.num_nodes):  # children in rank order: the most probable first
        siblings = tree.children(tree.parents[node])
        assert tree.ranks[node] == siblings.index(node)


def test_static_growth_follows_the_shape_with_top_ranked_children():
    rows = torch.softmax(3 * torch.randn(12, 12, generator=torch.Generator().manual_seed(1)), dim=-1)
    parents = (-1, 0, 0, 0, 1, 1, 2, 4)
    tree = grow_static(markov_expander(rows), 3, parents).draft_tree()
    assert tree.parents == parents
    for node in range(tree.num_nodes):
        children = [tree.token_list[child] for child in tree.children(node)]
        assert children == torch.topk(rows[tree.token_list[node]], len(children)).indices.tolist()


def test_tree_shape_capped_drops_deep_nodes():
    shape = StageShape("tree", parents=(-1, 0, 1, 2, 0, 4))
    assert shape.capped(2).parents == (-1, 0, 1, 0, 3)
    assert shape.capped(3) is shape and shape.capped(0) is None
    assert StageShape("tree", budget=8, depth=5, dynamic=True).capped(2) == StageShape("tree", budget=8, depth=2, dynamic=True)


def recomputed_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1]  # [vocab]


@pytest.mark.parametrize("shape", [StageShape("tree", parents=(-1, 0, 0, 1, 1, 2, 3, 6)), StageShape("tree", budget=12, depth=4, dynamic=True)],
                         ids=["static", "dynamic"])
def test_model_tree_children_are_the_top_tokens_of_a_full_recompute(shape):
    """Each level's forward (tree mask over a cache holding earlier levels) equals recomputing the path."""
    model = tiny_llama("eager", seed=1)
    drafter = ModelTreeDrafter("tiny", model, CPU)
    committed = [3, 17, 42, 17, 8, 55]
    for round_ in range(2):  # the second round reuses the drafter's cache of the committed text
        growth = drafter.grow(committed, shape, GREEDY, torch.Generator())
        tree = growth.draft_tree()
        assert drafter.session.cached == committed  # every draft node was dropped again
        for node in range(tree.num_nodes):
            children = [tree.token_list[child] for child in tree.children(node)]
            if children:
                path = [tree.token_list[n] for n in tree.path_to(node)[1:]]
                top = torch.topk(recomputed_logits(model, committed + path), len(children)).indices.tolist()
                assert children == top, (round_, node)
        for node in growth.selected or range(growth.num_nodes):  # scores: products of recomputed probabilities
            path = growth.path_tokens(node)
            probability = 1.0
            for depth, token in enumerate(path):
                probability *= torch.softmax(recomputed_logits(model, committed + path[:depth]), -1)[token].item()
            assert growth.scores[node] == pytest.approx(probability, rel=1e-4), (round_, node)
        committed = committed + [tree.token_list[1], 7]


def test_model_tree_sampled_children_carry_their_draft_rows():
    model = tiny_llama("eager", seed=1)
    drafter = ModelTreeDrafter("tiny", model, CPU)
    committed = [3, 17, 42, 17, 8]
    sampling = SamplingConfig(0.8, 0.9, seed=1)
    tree = drafter.propose_tree(committed, StageShape("tree", parents=(-1, 0, 0, 0, 1, 1, 4)), sampling,
                                torch.Generator().manual_seed(1))
    assert tree.sampled == (False,) + (True,) * (tree.num_nodes - 1)
    for node in range(tree.num_nodes):
        children = tree.children(node)
        if not children:
            continue
        path = [tree.token_list[n] for n in tree.path_to(node)[1:]]
        expected = target_probabilities(recomputed_logits(model, committed + path)[None], 0.8, 0.9)[0]
        assert torch.allclose(tree.draft_probs[node], expected, atol=1e-5)
        tokens = [tree.token_list[child] for child in children]
        assert len(set(tokens)) == len(tokens) and all(expected[token] > 0 for token in tokens)


def test_ngram_tree_offers_every_continuation_of_the_context():
    committed = [1, 2, 3, 10, 11, 4, 1, 2, 3, 20, 21, 5, 1, 2, 3]
    drafter = NgramTreeDrafter(3)
    tree = drafter.propose_tree(committed, StageShape("tree", budget=7, depth=3, dynamic=True), GREEDY, torch.Generator())
    assert {(20, 21, 5), (10, 11, 4)} <= tree_paths(tree)
    assert [tree.token_list[child] for child in tree.children(0)][:2] == [20, 10]  # most recent first
    assert drafter.propose(committed, 2, GREEDY, torch.Generator()).tokens == (20, 21)
    assert drafter.propose([1, 2, 3, 4], 2, GREEDY, torch.Generator()).tokens == ()  # another text: re-indexed


def test_recycle_learns_from_target_forwards_and_expands_breadth_first():
    drafter = RecycleDrafter(top_k=3)
    logits = torch.full((3, 10), -10.0)  # [3, vocab]: after 1 -> 2 (then 3), after 2 -> 5, after 5 -> 1
    logits[0, 2], logits[0, 3], logits[1, 5], logits[2, 1] = 5.0, 4.0, 5.0, 5.0
    drafter.observe([1, 2, 5], logits)
    tree = drafter.propose_tree([9, 1], StageShape("tree", parents=(-1, 0, 0, 1, 3)), GREEDY, torch.Generator())
    assert tree.token_list == (1, 2, 3, 5, 1) and tree.sampled is None
    dynamic = drafter.propose_tree([9, 1], StageShape("tree", budget=4, depth=3, dynamic=True), GREEDY, torch.Generator())
    assert dynamic.token_list == (1, 2, 5, 1)  # the confident chain beats the second-ranked sibling
    assert drafter.propose([1], 3, GREEDY, torch.Generator()).tokens == (2, 5, 1)
    drafter.observe([1], torch.nn.functional.one_hot(torch.tensor([7]), 10).float() * 9)
    assert drafter.propose([1], 1, GREEDY, torch.Generator()).tokens == (7,)  # overwritten by the newest forward
    drafter.reset()
    assert drafter.propose([1], 3, GREEDY, torch.Generator()).tokens == ()


def test_cache_drafter_is_an_lru_table_that_can_persist():
    text = [1, 2, 3, 4, 1, 2, 5, 1, 2]
    drafter = CacheDrafter(max_ngram=2)
    tree = drafter.propose_tree(text, StageShape("tree", budget=5, depth=2, dynamic=True), GREEDY, torch.Generator())
    assert [tree.token_list[child] for child in tree.children(0)] == [5, 3]  # most recent follower first
    drafter.reset()
    assert drafter.propose([7, 1, 2], 2, GREEDY, torch.Generator()).tokens == ()
    persistent = CacheDrafter(max_ngram=2, persistent=True)
    persistent.propose(text, 1, GREEDY, torch.Generator())
    persistent.reset()
    assert persistent.propose([7, 1, 2], 2, GREEDY, torch.Generator()).tokens == (5, 1)


def model_growth(sampled: bool = False) -> Growth:
    """Root 9; children 1 (0.5), 2 (0.3), 3 (0.1); 1 has children 4 (0.5), 5 (0.4)."""
    growth = Growth(9)
    row = torch.full((10,), 0.1) if sampled else None
    first = growth.add_children(0, Children((1, 2, 3), (0.5, 0.3, 0.1), row))
    growth.add_children(first[0], Children((4, 5), (0.5, 0.4), row))
    return growth


def test_graft_keeps_the_budget_deduplicates_and_ranks_retrieved_nodes_last():
    retrieved = DraftTree((-1, 0, 1, 0, 3), torch.tensor([9, 1, 6, 7, 8]))  # 1 -> 6 and 7 -> 8
    tree = graft(model_growth(), retrieved, size=6)
    assert tree.num_nodes == 6
    # 3 extras (6, 7, 8; 1 is de-duplicated) replace the 3 lowest-scored model leaves: 3, 5, 4
    assert tree_paths(tree) == {(1,), (2,), (1, 6), (7,), (7, 8)}
    assert [tree.token_list[c] for c in tree.children(0)] == [1, 2, 7]  # retrieved ranked after the model
    smaller = graft(model_growth(), DraftTree((-1, 0), torch.tensor([9, 6])), size=6)
    assert tree_paths(smaller) == {(1,), (2,), (1, 4), (1, 5), (6,)}  # one extra: only 3 (0.1) is pruned
    assert graft(model_growth(), DraftTree((-1,), torch.tensor([9])), size=6).num_nodes == 6  # nothing retrieved


def test_graft_prunes_only_the_last_sampled_siblings():
    tree = graft(model_growth(sampled=True), DraftTree((-1, 0, 0), torch.tensor([9, 6, 7])), size=6)
    root_children = [tree.token_list[c] for c in tree.children(0)]
    assert root_children[:2] == [1, 2] and 3 not in root_children  # the drawn prefix 1, 2 stays
    assert all(tree.sampled[c] for c in tree.children(0)[:2]) and not tree.sampled[tree.children(0)[-1]]
    assert tree.num_nodes == 6 and tree.draft_probs is not None


def test_graft_drafter_grafts_retrieved_tokens_into_a_model_tree():
    model = tiny_llama("eager", seed=1)
    committed = [1, 2, 3, 40, 41, 42, 1, 2, 3]
    drafter = GraftDrafter(ModelTreeDrafter("tiny", model, CPU), NgramTreeDrafter(3), graft_budget=3)
    for shape in (StageShape("tree", budget=8, depth=3, dynamic=True), StageShape("tree", parents=(-1, 0, 0, 1, 1, 2, 3, 3))):
        tree = drafter.propose_tree(committed, shape, GREEDY, torch.Generator())
        assert tree.num_nodes == 8 and (40, 41, 42) in tree_paths(tree)
    small = drafter.propose_tree(committed, StageShape("tree", parents=(-1, 0)), GREEDY, torch.Generator())
    assert small.num_nodes == 2  # the capped shape at the end of a generation: no room to graft


def test_children_counts_and_ties_in_best_first_growth():
    """Equal weights: the parent comes before the child, the elder sibling before the younger."""
    def expand(growth, nodes, counts):
        return [Children(tuple(range(1, count + 1)), (1.0,) * count) for count in counts]
    growth = grow_best_first(expand, 0, budget=5, depth=3, width=2)
    tree = growth.draft_tree()
    assert tree.num_nodes == 5
    assert all(tree.parents[node] < node for node in range(1, 5))
    assert list(itertools.chain.from_iterable(tree.children(n) for n in range(5))) == [1, 2, 3, 4]


@pytest.mark.parametrize("seed", range(6))
def test_a_retrieval_sequence_is_the_rank0_chain_of_its_static_tree(seed):
    """``propose`` walks the rank-0 chain without building a tree: the same tokens as the chain
    shape grown by ``propose_tree``, also where a lookup runs out of candidates."""
    rng = np.random.default_rng(seed)
    text = [int(t) for t in rng.integers(0, 6, size=60)]
    recycle = RecycleDrafter(top_k=3)
    recycle.observe(text[:-1], torch.randn(59, 6, generator=torch.Generator().manual_seed(seed)))
    for drafter in (NgramTreeDrafter(2), NgramTreeDrafter(3), CacheDrafter(), recycle):
        for cut in (5, 20, 40, 60):
            for gamma in (1, 3, 8):
                chain = StageShape("tree", parents=(-1, *range(gamma)))
                tree = drafter.propose_tree(text[:cut], chain, GREEDY, torch.Generator()).token_list[1:]
                assert tuple(drafter.propose(text[:cut], gamma, GREEDY, torch.Generator()).tokens) == tuple(tree)
