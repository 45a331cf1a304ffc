"""Seeded random profiles and slow reference solvers for the planner tests.

Latency curves are profiled at every n = 1..MAX_N so that the references read T(n) straight
from the curve (no interpolation), independently of :mod:`specplan.planner.latency`.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from specplan.core.profile import AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry

MAX_N = 40
CONTEXT = 256


def linear_curve(base: float, slope: float, max_n: int = MAX_N, context: int = CONTEXT) -> LatencyCurve:
    """T(n) = base + slope * (n - 1) at every n = 1..max_n."""
    n = tuple(range(1, max_n + 1))
    return LatencyCurve(context, n, tuple(base + slope * (k - 1) for k in n))


def rank_vector(rng: np.random.Generator, width: int) -> tuple[float, ...]:
    """A random rank-acceptance vector summing to < 1 (not necessarily decreasing)."""
    raw = rng.random(width + 1)
    raw[0] *= 3.0  # usually, but not always, the top rank is the likeliest
    return tuple(float(v) for v in raw[:width] / raw.sum())


def random_profile(rng: np.random.Generator, models: int, retrieval: int = 0, rank_width: int = 3,
                   pair_density: float = 1.0) -> Profile:
    """A target and ``models - 1`` drafters of random cost, every pair (or a random share) measured."""
    entries = [ModelEntry("target", "default", "fp", role="target",
                          latency=(linear_curve(float(rng.uniform(40, 80)), float(rng.uniform(0.1, 3.0))),))]
    for index in range(models - 1):
        base = float(rng.uniform(1.0, 35.0))
        entries.append(ModelEntry(f"draft{index}", f"model:draft{index}", "fp",
                                  latency=(linear_curve(base, float(rng.uniform(0.0, 0.3)) * base),)))
    stores = tuple(RetrievalEntry(f"ngram{k}", f"ngram:{k + 2}", float(rng.uniform(0.01, 0.5))) for k in range(retrieval))
    acceptance = []
    ids = [m.id for m in entries] + [r.id for r in stores]
    for drafter, verifier in itertools.permutations(ids, 2):
        if verifier.startswith("ngram") or rng.random() > pair_density:
            continue
        acceptance.append(AcceptanceEntry(drafter, verifier, 0.0, float(rng.uniform(0.05, 0.95)), 8,
                                          rank_accept=rank_vector(rng, rank_width)))
    return Profile(DeviceInfo("cpu", "test cpu", "cpu"), tuple(entries), tuple(acceptance), stores)


def plain_latency(profile: Profile, model_id: str, n: int) -> float:
    """T(n) read directly from a dense curve (n = 1..MAX_N); inf beyond twice its range."""
    curve = profile.model(model_id).latency[0]
    if n <= len(curve.n):
        return curve.ms[n - 1]
    if n > 2 * curve.n[-1]:
        return math.inf
    return curve.ms[-1] + (curve.ms[-1] - curve.ms[-2]) * (n - curve.n[-1])


def leviathan(gamma: int, alpha: float) -> float:
    """E(gamma, alpha) = sum_{a=0..gamma} alpha^a, written as the plain sum."""
    return sum(alpha**a for a in range(gamma + 1))


@functools.lru_cache(maxsize=None)
def ordered_trees(nodes: int, depth: int, width: int) -> tuple[tuple, ...]:
    """Every ordered rooted tree of exactly ``nodes`` nodes, depth <= depth, <= width children each.

    A tree is the tuple of its children's subtrees, in rank order.
    """
    if nodes == 1:
        return ((),)
    if depth == 0:
        return ()
    return tuple(_forests(nodes - 1, depth - 1, width, width))


def _forests(nodes: int, depth: int, width: int, slots: int):
    """Ordered sequences of at most ``slots`` trees (depth <= depth, width cap ``width``)
    with ``nodes`` nodes in all."""
    if nodes == 0:
        yield ()
        return
    if slots == 0:
        return
    for first in range(1, nodes + 1):
        for head in ordered_trees(first, depth, width):
            for tail in _forests(nodes - first, depth, width, slots - 1):
                yield (head,) + tail


def tree_rank_paths(tree: tuple) -> list[tuple[int, ...]]:
    """The rank path of every node (root: ())."""
    paths = [()]
    for rank, child in enumerate(tree):
        paths.extend((rank,) + path for path in tree_rank_paths(child))
    return paths


def tree_parents(tree: tuple) -> tuple[int, ...]:
    """Parent array of a nested tree in BFS order, children in rank order."""
    parents, queue = [-1], [(0, tree)]
    for node, subtree in queue:
        for child in subtree:
            queue.append((len(parents), child))
            parents.append(node)
    return tuple(parents)


@functools.lru_cache(maxsize=None)
def _rank_count_matrix(nodes: int, depth: int, width: int) -> tuple[np.ndarray, np.ndarray, int]:
    """For every tree: how often each rank occurs on each node's path (for vectorised F)."""
    trees = ordered_trees(nodes, depth, width)
    rows, owner = [], []
    for index, tree in enumerate(trees):
        for path in tree_rank_paths(tree):
            rows.append(np.bincount(np.array(path, dtype=int), minlength=width)[:width] if path else np.zeros(width))
            owner.append(index)
    return np.array(rows, dtype=float).reshape(-1, width), np.array(owner), len(trees)


def brute_force_tree_values(accept: tuple[float, ...], nodes: int, depth: int) -> np.ndarray:
    """F of every ordered tree of ``nodes`` nodes (depth/width caps), in ordered_trees order."""
    width = len(accept)
    counts, owner, count = _rank_count_matrix(nodes, depth, width)
    if count == 0:
        return np.empty(0)
    reach = np.prod(np.power(np.array(accept)[None, :], counts), axis=1)
    return np.bincount(owner, weights=reach, minlength=count)


def with_histograms(profile: Profile, rng: np.random.Generator, share: float = 0.5) -> Profile:
    """Give a random share of the acceptance entries an accepted-length histogram (G = 6), and
    those of retrieval drafters a drafted-length histogram (their lookups may draft fewer)."""
    retrieval = {entry.id for entry in profile.retrieval}
    entries = []
    for entry in profile.acceptance:
        if rng.random() < share:
            hist = tuple(int(v) for v in rng.integers(0, 50, size=7))
            drafted = tuple(int(v) for v in rng.integers(0, 50, size=7)) if entry.drafter in retrieval else ()
            entry = AcceptanceEntry(entry.drafter, entry.verifier, entry.temperature, entry.alpha, 6,
                                    hist if sum(hist) else (1,) * 7, entry.rank_accept,
                                    drafted_hist=drafted if sum(drafted) else ())
        entries.append(entry)
    return Profile(profile.device, profile.models, tuple(entries), profile.retrieval)


def reference_accepted(entry: AcceptanceEntry, gamma: int) -> float:
    """E of a chain of gamma: mean of min(A, gamma) + 1 over the histogram, else Leviathan's sum."""
    hist = entry.accepted_hist
    if hist and sum(hist) and gamma <= len(hist) - 1:
        return sum(count * (min(a, gamma) + 1) for a, count in enumerate(hist)) / sum(hist)
    return leviathan(gamma, entry.alpha)


def reference_ranks(parents: tuple[int, ...]) -> list[int]:
    """Each node's 0-based rank among its siblings (root: 0)."""
    seen: dict[int, int] = {}
    ranks = [0]
    for parent in parents[1:]:
        ranks.append(seen.get(parent, 0))
        seen[parent] = ranks[-1] + 1
    return ranks


def reference_tree_value(parents: tuple[int, ...], accept: tuple[float, ...]) -> float:
    """F of a parent array: sum over nodes of the product of rank acceptances on the path."""
    seen: dict[int, int] = {}
    reach = [1.0]
    for parent in parents[1:]:
        rank = seen.get(parent, 0)
        seen[parent] = rank + 1
        reach.append(reach[parent] * (accept[rank] if rank < len(accept) else 0.0))
    return sum(reach)


def reference_draft_call(profile: Profile, drafter: str, width: int) -> float:
    store = profile.retrieval_entry(drafter)
    return store.ms_per_call if store is not None else plain_latency(profile, drafter, width)


def reference_chain_cost(profile: Profile, stages, temperature: float = 0.0) -> float:
    """Closed-form ms per token of a chain of stages, bottom to top (docs/planner-math.md 1, 2, 4)."""
    if not stages:
        return plain_latency(profile, profile.target.id, 1)
    level = 0.0
    for index, stage in enumerate(stages):
        entry = profile.acceptance_for(stage.drafter, stage.verifier, temperature)
        verify = lambda n, v=stage.verifier: plain_latency(profile, v, n)  # noqa: E731
        if stage.shape.kind == "tree":
            assert index == 0, "a tree can only be the bottom stage"
            parents = stage.shape.parents
            accept = entry.rank_accept
            call = 0.0
            if stage.shape.graft:  # [p_1..p_B, r_1..r_R], B = the ranks the model keeps
                retrieved = profile.acceptance_for(stage.shape.graft, stage.verifier, temperature)
                ranks = reference_ranks(parents)
                model_width = next(b for b in range(1, max(ranks) + 1)
                                   if sum(rank >= b for rank in ranks[1:]) == stage.shape.graft_budget)
                accept = tuple(accept[:model_width]) + tuple(retrieved.retrieval_rank_accept)
                call = reference_draft_call(profile, stage.shape.graft, 1)
            levels = [0]
            for parent in parents[1:]:
                levels.append(levels[parent] + 1)
            expanded = [levels[p] for p in set(parents[1:])]
            width = max(expanded.count(level) for level in set(expanded))
            draft = max(levels) * (reference_draft_call(profile, stage.drafter, width) + call)
            level = (draft + verify(len(parents))) / reference_tree_value(parents, accept)
            continue
        gamma = stage.shape.gamma
        token = reference_draft_call(profile, stage.drafter, 1) if index == 0 else level
        level = (gamma * token + reference_verify(entry, gamma, verify)) / reference_accepted(entry, gamma)
    return level


def reference_verify(entry: AcceptanceEntry, gamma: int, verify) -> float:
    """The verify forward's mean ms over the profiled rounds: a round that drafted d tokens, asked
    for gamma, verifies min(d, gamma) + 1 (T(gamma + 1) without a drafted histogram covering gamma)."""
    hist = entry.drafted_hist
    if hist and sum(hist) and gamma <= len(hist) - 1:
        return sum(count * verify(min(d, gamma) + 1) for d, count in enumerate(hist)) / sum(hist)
    return verify(gamma + 1)
