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
