"""``cache``: Cacheback decoding (Ma, Gim and Zhong, arXiv 2511.21699).

A least-recently-used table maps a *leader* (the last n tokens, n = 1..N) to its recent
*followers*, most recent first. Every committed token is recorded as the follower of the
n-grams before it; the least recently used leaders are evicted beyond ``capacity``, and a
leader keeps at most ``followers`` tokens. Drafting queries the table recursively from the
root, longest leader first, to build a tree (breadth-first, level by level). Weights are a
recency prior, ``2^-rank`` (halved again for every step down in n), for best-first growth.

``persistent=True`` keeps the table across prompts (Cacheback's cross-request locality);
the default clears it on ``reset`` so that sampled runs are reproducible.
"""

from __future__ import annotations

from collections import OrderedDict

from specplan.runtime.drafters.retrieval_tree import RetrievalTreeDrafter, unseen_start
from specplan.runtime.drafters.tree_growth import Children


class LruNgramTable:
    """leader (tuple of tokens) -> followers (most recent first), with LRU eviction of leaders.

    >>> table = LruNgramTable(capacity=2, followers=2)
    >>> for leader, follower in [((1,), 5), ((1,), 6), ((2,), 7), ((1,), 5), ((3,), 8)]:
    ...     table.record(leader, follower)
    >>> table.lookup((1,)), table.lookup((2,)), table.lookup((3,))
    ([5, 6], None, [8])
    """

    def __init__(self, capacity: int = 65536, followers: int = 8):
        self.capacity = capacity
        self.max_followers = followers
        self.leaders: OrderedDict[tuple[int, ...], list[int]] = OrderedDict()

    def record(self, leader: tuple[int, ...], follower: int) -> None:
        followers = self.leaders.pop(leader, [])
        if follower in followers:
            followers.remove(follower)
        followers.insert(0, follower)
        del followers[self.max_followers:]
        self.leaders[leader] = followers
        while len(self.leaders) > self.capacity:
            self.leaders.popitem(last=False)

    def lookup(self, leader: tuple[int, ...]) -> list[int] | None:
        followers = self.leaders.get(leader)
        if followers is not None:
            self.leaders.move_to_end(leader)
        return followers


class CacheDrafter(RetrievalTreeDrafter):
    """``cache``: LRU n-gram tables (leaders of 1..max_ngram tokens)."""

    def __init__(self, max_ngram: int = 3, capacity: int = 65536, followers: int = 8, persistent: bool = False):
        self.name = "cache"
        self.max_ngram = max_ngram
        self.context_tokens = max_ngram
        self.settings = (capacity, followers)
        self.persistent = persistent
        self.table = LruNgramTable(capacity, followers)
        self.seen: list[int] = []

    def reset(self) -> None:
        self.seen = []
        if not self.persistent:
            self.table = LruNgramTable(*self.settings)

    def prepare(self, committed: list[int]) -> None:
        """Record the followers of every new committed position."""
        start = unseen_start(self.seen, committed)
        if start is None:
            self.seen, start = [], 0
        for position in range(start, len(committed)):
            for n in range(1, min(self.max_ngram, position) + 1):
                self.table.record(tuple(committed[position - n : position]), committed[position])
        self.seen.extend(committed[start:])

    def successors(self, context: list[int], count: int) -> Children:
        tokens: list[int] = []
        weights: list[float] = []
        scale = 1.0
        for n in range(min(self.max_ngram, len(context)), 0, -1):
            followers = self.table.lookup(tuple(context[-n:]))
            if not followers:
                continue
            for rank, token in enumerate(followers):
                if len(tokens) == count:
                    return Children(tuple(tokens), tuple(weights))
                if token not in tokens:
                    tokens.append(token)
                    weights.append(scale * 0.5 ** rank)
            scale *= 0.5
        return Children(tuple(tokens), tuple(weights))
