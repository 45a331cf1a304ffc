"""A floor under any tree's cost per committed token, used to skip tree DPs that cannot win
(docs/planner-math.md section 12.2).

Sequoia's value of a tree (arXiv 2402.12374, section 2.3) is the expected number of tokens a
round commits, ``F = sum over nodes of the product of rank acceptances on the path to it`` (the
root counts 1: the bonus token). A tree of ``n`` nodes has ``n - 1`` distinct non-root paths
(rank sequences), so ``F <= F_max(n) = 1 + the sum of the n - 1 largest path products`` over all
rank sequences; a path's product never exceeds its prefix's (every factor is at most 1), so a
best-first walk yields them largest first. Drafting costs time, so any tree of ``n`` nodes costs
at least ``T_v(n) / F_max(n)`` ms per token. A budget whose floor is above the best cost found
so far (the incumbent) cannot hold the optimum: the DP over the budgets up to the largest one
that can returns the same optimum as the DP over all of them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence


def most_committed(accept: Sequence[float], max_budget: int) -> list[float]:
    """``F_max(n)`` for ``n = 0..max_budget``: the most tokens a tree of ``n`` nodes can commit
    per round under the rank acceptance vector ``accept`` (index 0 is 0: no tree).

    >>> [round(f, 3) for f in most_committed([0.5, 0.25], 4)]  # paths: 0.5, 0.25 (or 0.5 * 0.5), ...
    [0.0, 1.0, 1.5, 1.75, 2.0]
    """
    values = [0.0, 1.0]
    heap = [(-float(p), 1) for p in accept]  # (-product, depth) of one-step paths
    heapq.heapify(heap)
    while len(values) <= max_budget:
        if not heap:
            values.append(values[-1])
            continue
        product, depth = heapq.heappop(heap)
        values.append(values[-1] - product)
        if depth < max_budget:
            for p in accept:
                heapq.heappush(heap, (product * float(p), depth + 1))
    return values[: max_budget + 1]


def budget_cap(accept: Sequence[float], verify_ms: Callable[[int], float], incumbent: float, max_budget: int) -> int:
    """The largest budget in ``2..max_budget`` whose floor ``T_v(n) / F_max(n)`` is at most
    ``incumbent`` ms per token, or 1 when no tree can beat it.

    >>> budget_cap([0.5], lambda n: 10.0 * n, 8.0, 16)
    1
    >>> budget_cap([0.5], lambda n: 10.0 + n, 8.0, 16)  # 10 + n <= 8 * (2 - 0.5 ** (n - 1)) up to n = 5
    5
    >>> budget_cap([0.5], lambda n: 10.0 + n, 20.0, 16)
    16
    """
    most = most_committed(accept, max_budget)
    cap = 1
    for nodes in range(2, max_budget + 1):
        if verify_ms(nodes) <= incumbent * most[nodes]:
            cap = nodes
    return cap
