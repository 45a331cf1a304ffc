"""Growing a draft tree level by level: to a static shape, or best-first under a budget.

Every tree drafter (a model, a retrieval table) supplies one function, ``expand(growth,
nodes, counts)``, that returns the ranked candidate children of several nodes of the same
depth at once (a model drafter runs one forward over them). This module decides which
nodes to expand and which candidates to keep:

- **static** (Sequoia, arXiv 2402.12374): the planner's DP parent array; the children of a
  node are the drafter's top-ranked candidates in rank order (draw order when sampled).
- **best-first** (EAGLE-2, arXiv 2406.16858; DySpec, arXiv 2410.11744): the key of a node
  is the product of draft probabilities along its root path. A max-heap that pops the best
  candidate, adds it and pushes its best child and its next sibling ends with the
  ``budget - 1`` best-keyed nodes of the (depth-capped) infinite tree. Keys never increase
  along a path, so that set is closed under ancestors; here a sibling's key is also capped
  by the previous sibling's (the heap pushes a sibling only after its elder), so it is
  closed under elder siblings too, which sampled children drawn without replacement need.
  Level by level: after each forward the current top ``budget - 1`` of the known candidates
  contains every final node of that depth (other candidates can only push nodes out), so
  expanding exactly those nodes of the new depth is enough: one forward per depth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from specplan.runtime.tree import DraftTree


@dataclass(frozen=True)
class Children:
    """Ranked candidate children of one node.

    ``draft_row`` is the draft distribution the tokens were drawn from, without replacement
    and in this order (sampling); ``None`` means deterministic proposals (top-k, retrieved).
    """

    tokens: tuple[int, ...]  # [k] best first (draw order when sampled)
    weights: tuple[float, ...]  # [k] draft probability of each token, in (0, 1]
    draft_row: torch.Tensor | None = None  # [vocab] float32 on the CPU

    @classmethod
    def empty(cls) -> "Children":
        return cls((), ())


class Growth:
    """A tree under construction: nodes are appended parent first, siblings in rank order."""

    def __init__(self, root_token: int):
        self.tokens = [int(root_token)]  # [num_nodes]
        self.parents = [-1]  # [num_nodes]
        self.depth = [0]  # [num_nodes]
        self.scores = [1.0]  # [num_nodes] product of draft probabilities on the root path
        self.sampled = [False]  # [num_nodes] drawn from the parent's draft row
        self.children: list[list[int]] = [[]]
        self.rows: dict[int, torch.Tensor] = {}  # node -> [vocab] row its sampled children came from
        self.selected: list[int] | None = None  # nodes of the final tree (None: all)

    @property
    def num_nodes(self) -> int:
        return len(self.tokens)

    def path_tokens(self, node: int) -> list[int]:
        """Tokens from the root's child down to ``node`` (the root itself excluded)."""
        path = []
        while node > 0:
            path.append(self.tokens[node])
            node = self.parents[node]
        return path[::-1]

    def add(self, parent: int, token: int, weight: float = 1.0, sampled: bool = False) -> int:
        """Append a child of ``parent`` (after its existing children); return its index."""
        node = len(self.tokens)
        score = self.scores[parent] * float(weight)
        if self.children[parent]:
            score = min(score, self.scores[self.children[parent][-1]])
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.depth.append(self.depth[parent] + 1)
        self.scores.append(score)
        self.sampled.append(sampled)
        self.children.append([])
        self.children[parent].append(node)
        return node

    def add_children(self, parent: int, children: Children, limit: int | None = None) -> list[int]:
        """Append (up to ``limit`` of) ``children`` under ``parent``; return their indices."""
        sampled = children.draft_row is not None
        if sampled:
            self.rows[parent] = children.draft_row
        count = len(children.tokens) if limit is None else min(limit, len(children.tokens))
        return [self.add(parent, children.tokens[i], children.weights[i], sampled) for i in range(count)]

    def best(self, budget: int) -> list[int]:
        """The root and the ``budget - 1`` best-keyed other nodes, in node order (ancestor-closed)."""
        ranked = sorted(range(1, self.num_nodes), key=lambda node: (-self.scores[node], node))
        return [0] + sorted(ranked[: max(0, budget - 1)])

    def draft_tree(self, nodes: Sequence[int] | None = None) -> DraftTree:
        """The DraftTree of ``nodes`` (default: ``selected``, else all), renumbered in node order."""
        if nodes is None:
            nodes = self.selected if self.selected is not None else range(self.num_nodes)
        nodes = sorted(nodes)
        index = {node: position for position, node in enumerate(nodes)}
        parents = tuple(-1 if node == 0 else index[self.parents[node]] for node in nodes)
        tokens = torch.tensor([self.tokens[node] for node in nodes], dtype=torch.long)  # [n]
        sampled = tuple(self.sampled[node] for node in nodes)
        if not any(sampled):
            return DraftTree(parents, tokens)
        width = max(row.numel() for row in self.rows.values())
        draft_probs = torch.zeros(len(nodes), width)  # [n, vocab]
        for node, row in self.rows.items():
            if node in index:
                draft_probs[index[node], : row.numel()] = row
        return DraftTree(parents, tokens, draft_probs, sampled)


Expand = Callable[[Growth, list[int], list[int]], list[Children]]


def grow_static(expand: Expand, root_token: int, parents: Sequence[int]) -> Growth:
    """Fill the static shape ``parents`` level by level; one ``expand`` call per depth.

    A shape node whose drafter offers fewer candidates than the shape asks for loses the
    missing children and their subtrees, so the tree may come out smaller than the shape.
    """
    shape_children: list[list[int]] = [[] for _ in parents]
    for node in range(1, len(parents)):
        shape_children[parents[node]].append(node)
    growth = Growth(root_token)
    placed = {0: 0}  # shape node -> growth node
    frontier = [0]
    while frontier:
        wanted = [shape for shape in frontier if shape_children[shape]]
        if not wanted:
            break
        offered = expand(growth, [placed[shape] for shape in wanted], [len(shape_children[shape]) for shape in wanted])
        frontier = []
        for shape, children in zip(wanted, offered):
            added = growth.add_children(placed[shape], children, limit=len(shape_children[shape]))
            for child_shape, node in zip(shape_children[shape], added):
                placed[child_shape] = node
                frontier.append(child_shape)
    return growth


def grow_best_first(expand: Expand, root_token: int, budget: int, depth: int, width: int = 8) -> Growth:
    """Best-first (EAGLE-2 / DySpec) tree of at most ``budget`` nodes and depth <= ``depth``.

    Each node offers at most ``min(width, budget - 1)`` ranked children. ``growth.selected``
    holds the chosen nodes; the other candidates stay in ``growth`` unselected.

    Example
    -------
    >>> table = {5: ((1, 2), (0.6, 0.3)), 1: ((3,), (0.9,)), 2: ((4,), (0.1,)), 3: ((7,), (0.2,))}
    >>> def expand(growth, nodes, counts):
    ...     return [Children(*table.get(growth.tokens[n], ((), ()))[:2]) for n in nodes]
    >>> growth = grow_best_first(expand, 5, budget=4, depth=3)
    >>> growth.draft_tree().parents, growth.draft_tree().token_list
    ((-1, 0, 0, 1), (5, 1, 2, 3))
    """
    growth = Growth(root_token)
    growth.selected = [0]
    per_node = max(0, min(width, budget - 1))
    frontier = [0] if per_node else []
    for level in range(depth):
        if not frontier:
            break
        offered = expand(growth, frontier, [per_node] * len(frontier))
        for node, children in zip(frontier, offered):
            growth.add_children(node, children, limit=per_node)
        growth.selected = growth.best(budget)
        frontier = [node for node in growth.selected if growth.depth[node] == level + 1]
    return growth
