"""The one tree representation: a parent array (docs/planner-math.md section 2).

``parents[i]`` is node i's parent; node 0 is the root (the last committed token) with parent -1,
and every other node's parent is an earlier node, so a parent array lists a tree in an order
where parents come first. Plans (core/plan.py), the planner's DP trees and the runtime's draft
trees (runtime/tree.py) all hold this array and all validate it here.
"""

from __future__ import annotations

from collections.abc import Sequence

from specplan.core.errors import TreeError


def check_parents(parents: Sequence[int]) -> tuple[int, ...]:
    """Validate a parent array and return it as a tuple of ints.

    Raises
    ------
    TreeError
        If it is empty, the root's parent is not -1, or some node's parent is not an
        earlier node (which is what a cycle or a parent listed after its child looks like).

    Example
    -------
    >>> check_parents([-1, 0, 0, 1])
    (-1, 0, 0, 1)
    """
    parents = tuple(int(parent) for parent in parents)
    if not parents:
        raise TreeError("a tree needs at least one node (the root); got an empty parent array")
    if parents[0] != -1:
        raise TreeError(f"node 0 is the root and its parent must be -1, got {parents[0]}")
    for node, parent in enumerate(parents[1:], start=1):
        if not 0 <= parent < node:
            kind = "itself or a later node (a cycle, or a parent after its child)" if parent >= node else "not a node"
            raise TreeError(
                f"node {node} has parent {parent}, which is {kind}; every parent must be an earlier node "
                f"(parents[i] < i), e.g. (-1, 0, 0, 1)"
            )
    return parents



def node_depths(parents: Sequence[int]) -> list[int]:
    """Depth of every node (root 0) of a valid parent array.

    >>> node_depths((-1, 0, 0, 1))
    [0, 1, 1, 2]
    """
    depths = [0] * len(parents)
    for node in range(1, len(parents)):
        depths[node] = depths[parents[node]] + 1
    return depths


def tree_depth(parents: Sequence[int]) -> int:
    """Depth of the deepest node (0 for the root alone).

    >>> tree_depth((-1, 0, 0, 1))
    2
    """
    return max(node_depths(parents))


def sibling_ranks(parents: Sequence[int]) -> tuple[int, ...]:
    """0-based rank of each node among its siblings, in node order (root: 0).

    >>> sibling_ranks([-1, 0, 0, 1, 2, 2])
    (0, 0, 1, 0, 0, 1)
    """
    seen: dict[int, int] = {}
    ranks = [0]
    for parent in parents[1:]:
        ranks.append(seen.get(parent, 0))
        seen[parent] = ranks[-1] + 1
    return tuple(ranks)


def most_children(parents: Sequence[int]) -> int:
    """The largest number of children of one node (a chain's is 1; the root alone: 0).

    >>> most_children((-1, 0, 0, 0, 1))
    3
    """
    return max(sibling_ranks(parents)[1:], default=-1) + 1


def leaf_count(parents: Sequence[int]) -> int:
    """Leaves of a tree (nodes with no children): its root-to-leaf paths.

    >>> leaf_count((-1, 0, 0, 1))
    2
    """
    return len(parents) - len(set(parents[1:]))


def depth_and_width(parents: Sequence[int]) -> tuple[int, int]:
    """(depth, width) of a tree: its deepest level and the most non-leaf nodes at one level.

    A model drafter expands one level per forward, so ``width`` is its widest forward.

    >>> depth_and_width([-1, 0, 0, 1, 2, 3])
    (3, 2)
    """
    depths = node_depths(parents)
    expanded: dict[int, int] = {}
    for parent in set(parents[1:]):
        expanded[depths[parent]] = expanded.get(depths[parent], 0) + 1
    return max(depths), max(expanded.values(), default=0)


def capped_parents(parents: Sequence[int], depth: int) -> tuple[int, ...]:
    """The same tree without its nodes deeper than ``depth`` (``depth >= 0``), renumbered in order.

    >>> capped_parents((-1, 0, 1, 2, 0, 4), 1)
    (-1, 0, 0)
    """
    depths = node_depths(parents)
    index: dict[int, int] = {}
    kept: list[int] = []
    for node, parent in enumerate(parents):
        if depths[node] <= depth:
            index[node] = len(kept)
            kept.append(-1 if node == 0 else index[parent])
    return tuple(kept)
