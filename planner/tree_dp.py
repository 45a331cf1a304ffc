"""The best draft tree for a rank-acceptance vector (Sequoia DP) and its hardware-aware size.

A tree is a parent array (``parents[0] = -1``, ``parents[i] < i``; node 0 is the last
committed token). Each non-root node has a 0-based rank among its siblings, and the children
of a node are numbered in rank order. With ``accept[k]`` the probability that the k-th ranked
child is the accepted one (Sequoia, arXiv 2402.12374), the expected accepted length of a tree,
bonus included, is::

    F(tree) = sum over nodes v of prod over edges on the root->v path of accept[rank(edge)]

The best tree of m nodes, depth <= l, whose root has b children (docs/planner-math.md section 2)::

    G[1][l][0] = 1
    G[m][l][b] = max_{1 <= y < m} G[y][l][b-1] + accept[b-1] * max_{b'} G[m-y][l-1][b']

in O(n^2 * d * W), vectorised over (m, y). The hardware-aware choice minimises over budget n
and depth cap d::

    L_tree = (depth * t_draft(width) + T_v(n)) / F(tree(n, d))

with ``depth`` and ``width`` those of the DP tree: ``width`` is the most nodes one drafter
forward expands (non-leaf nodes at one level). Appending retrieval ranks r_1..r_R to the
vector (Graft, arXiv 2605.20104) gives the graft tree with the same DP (section 3).

References
----------
Sequoia, arXiv 2402.12374; EAGLE-2, arXiv 2406.16858; DySpec, arXiv 2410.11744;
Graft, arXiv 2605.20104; Token Recycling, arXiv 2408.08696.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specplan.core.parents import sibling_ranks
from specplan.core.plan import validate_parents

RELATIVE_GAIN = 1e-12  # a deeper cap must improve F by more than this to be costed again


@dataclass(frozen=True)
class TreeSolution:
    """A tree and its value: ``parents`` [n], ``ranks`` [n] (0-based sibling rank; root 0)."""

    value: float
    parents: tuple[int, ...]
    ranks: tuple[int, ...]
    depth: int
    width: int  # most non-leaf nodes at one level (one drafter forward)


def tree_value(parents: Sequence[int], accept: Sequence[float], ranks: Sequence[int] | None = None) -> float:
    """F(tree) = sum over nodes of the product of rank acceptances along the root path.

    Parameters
    ----------
    parents : sequence of int
        Parent array, ``parents[0] = -1``, ``parents[i] < i``.
    accept : sequence of float
        ``accept[k]``: probability that the k-th ranked child (0-based) is accepted.
    ranks : sequence of int, optional
        Each node's rank; by default the sibling order in the parent array.

    Returns
    -------
    float
        Expected accepted length including the bonus token; 0 weight for ranks beyond accept.

    Examples
    --------
    >>> tree_value([-1, 0, 1], [0.5])        # a chain of 2: 1 + 0.5 + 0.25
    1.75
    >>> tree_value([-1, 0, 0], [0.5, 0.25])
    1.75
    """
    if ranks is None:
        validate_parents(tuple(parents))
    ranks = sibling_ranks(parents) if ranks is None else tuple(ranks)
    reach = [1.0]
    for node in range(1, len(parents)):
        rank = ranks[node]
        weight = accept[rank] if rank < len(accept) else 0.0
        reach.append(reach[parents[node]] * weight)
    return float(sum(reach))


@dataclass(frozen=True)
class TreeTable:
    """Sequoia DP tables for one acceptance vector, all budgets and depth caps at once."""

    accept: tuple[float, ...]
    value: np.ndarray  # [max_budget + 1, max_depth + 1, width + 1] G[m][l][b]; -inf: no such tree
    split: np.ndarray  # [max_budget + 1, max_depth + 1, width + 1] the y attaining G[m][l][b]

    def best(self, budget: int, depth: int) -> float:
        """max_b G[budget][depth][b]; -inf when no tree of that size fits the caps."""
        return float(self.value[budget, depth].max())


def solve_tree_table(accept: Sequence[float], max_budget: int, max_depth: int) -> TreeTable:
    """Fill G[m][l][b] for m <= max_budget, l <= max_depth, b <= len(accept) (Sequoia DP).

    Notes
    -----
    ``G[m][l][b] = max_y G[y][l][b-1] + accept[b-1] * max_b' G[m-y][l-1][b']``: the first
    b-1 children with the root use y nodes, the b-th child's subtree the other m-y. Width
    per node is capped by ``len(accept)``. O(max_budget^2 * max_depth * width).
    """
    accept = tuple(float(p) for p in accept)
    size, width = max_budget + 1, len(accept)
    value = np.full((size, max_depth + 1, width + 1), -np.inf)
    split = np.zeros((size, max_depth + 1, width + 1), dtype=np.int64)
    value[1, :, 0] = 1.0
    total_nodes = np.arange(size)[:, None]  # m
    first_nodes = np.arange(size)[None, :]  # y
    valid = (first_nodes >= 1) & (total_nodes - first_nodes >= 1)
    rest = np.where(valid, total_nodes - first_nodes, 0)  # m - y: the last child's subtree
    for level in range(1, max_depth + 1):
        best_child = value[:, level - 1, :].max(axis=1)  # [size] max_b' G[k][l-1][b']
        for children in range(1, width + 1):
            child = best_child[rest]  # [size, size] best subtree of m - y nodes
            finite = np.isfinite(child)
            child[finite] *= accept[children - 1]  # leave -inf (no such subtree) as it is
            total = np.where(valid, value[:, level, children - 1][first_nodes] + child, -np.inf)
            split[:, level, children] = total.argmax(axis=1)
            value[:, level, children] = total.max(axis=1)
    return TreeTable(accept, value, split)


def _children(table: TreeTable, nodes: int, depth: int) -> list[tuple[int, int]]:
    """(nodes, depth cap) of each child subtree of the best (nodes, depth) tree, in rank order."""
    count = int(table.value[nodes, depth].argmax())
    children = []
    while count > 0:
        first = int(table.split[nodes, depth, count])
        children.append((nodes - first, depth - 1))
        nodes, count = first, count - 1
    children.reverse()
    return children


def tree_from_table(table: TreeTable, budget: int, depth: int) -> TreeSolution | None:
    """Rebuild the DP's best tree of ``budget`` nodes and depth <= ``depth`` in BFS order.

    Returns None when no tree of that size fits the depth and width caps.
    """
    value = table.best(budget, depth)
    if not math.isfinite(value):
        return None
    parents, ranks, levels = [-1], [0], [0]
    queue = [(0, budget, depth)]  # (node index, subtree nodes, depth cap)
    expanded: dict[int, int] = {}
    for node, nodes, cap in queue:
        children = _children(table, nodes, cap)
        if children:
            expanded[levels[node]] = expanded.get(levels[node], 0) + 1
        for rank, (child_nodes, child_cap) in enumerate(children):
            queue.append((len(parents), child_nodes, child_cap))
            parents.append(node)
            ranks.append(rank)
            levels.append(levels[node] + 1)
    return TreeSolution(value, tuple(parents), tuple(ranks), max(levels), max(expanded.values(), default=0))


def best_tree(accept: Sequence[float], budget: int, depth: int) -> TreeSolution | None:
    """The tree of exactly ``budget`` nodes, depth <= ``depth``, width <= len(accept) maximising F.

    Examples
    --------
    >>> solution = best_tree([0.6, 0.2], budget=4, depth=2)
    >>> solution.parents, round(solution.value, 4)
    ((-1, 0, 0, 1), 2.16)
    """
    return tree_from_table(solve_tree_table(accept, budget, depth), budget, depth)


def _table_depth_and_width(table: TreeTable, budget: int, depth: int,
                           memo: dict[tuple[int, int], tuple[int, tuple[int, ...]]] | None = None) -> tuple[int, int]:
    """(depth, width) of the DP tree without numbering it: cheap, for costing many sizes.

    ``memo`` (one per table) keeps each subtree's depth and expanded nodes per level, so that
    costing every budget and depth cap of one table walks each (nodes, cap) subtree once.
    """
    deepest, expanded = _subtree_levels(table, budget, depth, {} if memo is None else memo)
    return deepest, max(expanded, default=0)


def _subtree_levels(table: TreeTable, nodes: int, cap: int,
                    memo: dict[tuple[int, int], tuple[int, tuple[int, ...]]]) -> tuple[int, tuple[int, ...]]:
    """(levels below the subtree's root, non-leaf nodes per level from its root) of the DP subtree."""
    if (nodes, cap) in memo:
        return memo[nodes, cap]
    children = _children(table, nodes, cap)
    deepest, expanded = 0, [1] if children else []
    for child_nodes, child_cap in children:
        child_deepest, child_expanded = _subtree_levels(table, child_nodes, child_cap, memo)
        deepest = max(deepest, child_deepest + 1)
        for level, count in enumerate(child_expanded, start=1):
            if level < len(expanded):
                expanded[level] += count
            else:
                expanded.append(count)
    memo[nodes, cap] = (deepest, tuple(expanded))
    return memo[nodes, cap]


@dataclass(frozen=True)
class TreeChoice:
    """The hardware-aware tree of one (drafter, verifier) pair and its per-round costs."""

    tree: TreeSolution
    budget: int  # nodes, root included = tokens in the verifier forward
    depth: int
    draft_ms: float  # depth * t_draft(width)
    verify_ms: float  # T_v(budget)
    ms_per_token: float
    graft: str = ""  # a retrieval drafter whose tokens fill ``graft_budget`` of the nodes (Graft)
    graft_budget: int = 0


def choose_tree(
    accept: Sequence[float],
    draft_ms: Callable[[int], float],
    verify_ms: Callable[[int], float],
    max_budget: int,
    max_depth: int,
) -> TreeChoice | None:
    """Sequoia's hardware-aware (n, d): minimise (depth * t_draft(width) + T_v(n)) / F.

    Parameters
    ----------
    accept : sequence of float
        Rank acceptance vector (width cap = its length); empty -> None.
    draft_ms : callable
        ``draft_ms(width)``: one drafter forward expanding ``width`` nodes.
    verify_ms : callable
        ``verify_ms(n)``: T_v(n), inf where refused.
    max_budget, max_depth : int
        Caps on nodes (root included) and depth. Budgets 2..max_budget are tried.

    Returns
    -------
    TreeChoice or None
        The cheapest tree per committed token, or None when no finite choice exists.

    Notes
    -----
    For each n, only depth caps where the best F strictly improves are costed (a cap that
    does not improve F admits the shallower tree, which costs no more draft time).
    """
    if not accept or max_budget < 2 or max_depth < 1:
        return None
    table = solve_tree_table(accept, max_budget, max_depth)
    memo: dict[tuple[int, int], tuple[int, tuple[int, ...]]] = {}
    best: tuple[float, int, int, float] | None = None
    for budget in range(2, max_budget + 1):
        verify = verify_ms(budget)
        if not math.isfinite(verify):
            continue
        previous = table.best(budget, 0)
        for depth in range(1, max_depth + 1):
            value = table.best(budget, depth)
            if not math.isfinite(value) or value <= previous * (1 + RELATIVE_GAIN):
                continue
            previous = value
            if best is not None and verify / value >= best[0]:
                continue  # drafting costs >= 0 ms: this tree cannot be cheaper (its shape is not walked)
            tree_depth, width = _table_depth_and_width(table, budget, depth, memo)
            draft = tree_depth * draft_ms(max(width, 1))
            cost = (draft + verify) / value
            if best is None or cost < best[0]:
                best = (cost, budget, depth, draft)
    if best is None:
        return None
    cost, budget, depth, draft = best
    tree = tree_from_table(table, budget, depth)
    return TreeChoice(tree, budget, tree.depth, draft, verify_ms(budget), cost)


@dataclass(frozen=True)
class GraftTree:
    """A prune-then-graft tree: ranks >= ``model_width`` are retrieved siblings."""

    tree: TreeSolution
    model_width: int
    retrieved: int  # how many nodes of the tree are retrieved tokens


def graft_tree(
    rank_accept: Sequence[float], retrieval_rank_accept: Sequence[float], budget: int, depth: int
) -> GraftTree | None:
    """The best tree of ``budget`` nodes on the extended vector [p_1..p_B, r_1..r_R].

    Retrieved candidates are extra, zero-draft-cost siblings ranked after the model's B
    children (docs/planner-math.md section 3; Graft, arXiv 2605.20104). The DP is unchanged; the
    result says how many of the ``budget`` nodes are retrieved (the graft budget) and, through
    ``tree.ranks``, where: node v is retrieved iff ``ranks[v] >= B``.

    Examples
    --------
    >>> graft = graft_tree([0.5], [0.3], budget=3, depth=1)
    >>> graft.tree.parents, graft.retrieved
    ((-1, 0, 0), 1)
    """
    width = len(rank_accept)
    tree = best_tree(graft_accept(rank_accept, retrieval_rank_accept, width), budget, depth)
    if tree is None:
        return None
    return GraftTree(tree, width, retrieved_nodes(tree.ranks, width))


def retrieved_nodes(ranks: Sequence[int], width: int) -> int:
    """How many non-root nodes of a graft tree are retrieved: those ranked at or after the
    model's ``width`` children (docs/planner-math.md section 3)."""
    return sum(1 for rank in ranks[1:] if rank >= width)


def graft_model_width(parents: Sequence[int], graft_budget: int) -> int:
    """The model's width B of a graft tree: the rank from which siblings are retrieved.

    Children of a node hold consecutive ranks from 0, so the count of nodes with rank >= B
    falls strictly as B grows until it reaches 0: exactly one B leaves ``graft_budget`` nodes.

    >>> graft_model_width([-1, 0, 0, 0, 1], 1)
    2
    """
    validate_parents(tuple(parents))
    ranks = sibling_ranks(parents)
    for width in range(max(ranks, default=0) + 1, 0, -1):
        if retrieved_nodes(ranks, width) == graft_budget:
            return width
    raise ValueError(f"no model width leaves {graft_budget} retrieved nodes in tree {tuple(parents)}")


def graft_accept(rank_accept: Sequence[float], retrieval_rank_accept: Sequence[float], width: int) -> tuple[float, ...]:
    """The extended rank vector [p_1..p_B, r_1..r_R] of a graft tree whose model keeps B = ``width``
    children per node (docs/planner-math.md section 3; Graft, arXiv 2605.20104).

    >>> graft_accept([0.5, 0.2, 0.1], [0.3], 1)
    (0.5, 0.3)
    """
    return tuple(rank_accept[:width]) + tuple(retrieval_rank_accept)


def choose_graft_tree(
    rank_accept: Sequence[float],
    retrieval_rank_accept: Sequence[float],
    draft_ms: Callable[[int], float],
    verify_ms: Callable[[int], float],
    max_budget: int,
    max_depth: int,
) -> TreeChoice | None:
    """The cheapest prune-then-graft tree over every model width B (Graft, arXiv 2605.20104).

    For each B, :func:`choose_tree` on :func:`graft_accept` (the DP is unchanged, section 3);
    ``draft_ms`` must include the retrieval call. Trees with no retrieved node are left out
    (they are plain model trees). ``graft_budget`` of the result is its retrieved node count;
    ``graft`` is left for the caller to name.
    """
    best: TreeChoice | None = None
    for width in range(1, len(rank_accept) + 1):
        choice = choose_tree(graft_accept(rank_accept, retrieval_rank_accept, width), draft_ms, verify_ms,
                             max_budget, max_depth)
        if choice is None:
            continue
        retrieved = retrieved_nodes(choice.tree.ranks, width)
        if retrieved and (best is None or choice.ms_per_token < best.ms_per_token):
            best = replace(choice, graft_budget=retrieved)
    return best
