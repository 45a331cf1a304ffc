"""``ngram:N`` as a tree drafter: prompt lookup with several distinct continuations.

The sequence drafter (:mod:`.ngram`) copies the continuation of the most recent earlier
match of the context's last n-gram. Here every earlier occurrence counts: the candidates
for the next token are the distinct tokens that followed the longest matching n-gram
(n = N down to 1), most recent first, then those that followed shorter matches. A
candidate's weight is its share of that n-gram's followers, halved for every step down in
n. References: Saxena, "Prompt Lookup Decoding" (2023); the retrieval trees of Token
Recycling (arXiv 2408.08696) and REST (arXiv 2311.08252).
"""

from __future__ import annotations

from collections import Counter

from specplan.runtime.drafters.retrieval_tree import RetrievalTreeDrafter, unseen_start
from specplan.runtime.drafters.tree_growth import Children


class FollowerIndex:
    """Every n-gram (n <= max_ngram) of a text, with the tokens that followed it, oldest first.

    >>> index = FollowerIndex(2)
    >>> index.update([5, 6, 7, 5, 6, 8])
    >>> index.followers[(5, 6)], index.followers[(6,)]
    ([7, 8], [7, 8])
    """

    def __init__(self, max_ngram: int):
        self.max_ngram = max_ngram
        self.seen: list[int] = []
        self.followers: dict[tuple[int, ...], list[int]] = {}

    def update(self, committed: list[int]) -> None:
        """Index the new tail of ``committed`` (start over when it is another text)."""
        start = unseen_start(self.seen, committed)
        if start is None:
            self.seen, self.followers, start = [], {}, 0
        for position in range(start, len(committed)):
            follower = committed[position]
            for n in range(1, min(self.max_ngram, position) + 1):
                self.followers.setdefault(tuple(committed[position - n : position]), []).append(follower)
        self.seen.extend(committed[start:])


class NgramTreeDrafter(RetrievalTreeDrafter):
    """``ngram:N`` / ``ngram:N:K`` for tree stages (and sequence stages through ``propose``)."""

    def __init__(self, max_ngram: int, min_ngram: int = 1):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram  # keys shorter than this draft nothing
        self.name = f"ngram-{max_ngram}" + (f"-{min_ngram}" if min_ngram > 1 else "")
        self.context_tokens = max_ngram
        self.index = FollowerIndex(max_ngram)

    def reset(self) -> None:
        self.index = FollowerIndex(self.max_ngram)

    def prepare(self, committed: list[int]) -> None:
        self.index.update(committed)

    def successors(self, context: list[int], count: int) -> Children:
        """Distinct followers of the longest matching n-gram first (most recent first), then shorter.

        >>> drafter = NgramTreeDrafter(2)
        >>> drafter.prepare([5, 6, 7, 5, 6, 8, 9, 6])
        >>> drafter.successors([5, 6], 3)
        Children(tokens=(8, 7), weights=(0.5, 0.5), draft_row=None)
        >>> drafter.successors([9, 6], 3).tokens
        (8, 7)
        """
        tokens: list[int] = []
        weights: list[float] = []
        scale = 1.0
        for n in range(min(self.max_ngram, len(context)), self.min_ngram - 1, -1):
            followers = self.index.followers.get(tuple(context[-n:]))
            if not followers:
                continue
            shares = Counter(followers)
            for token in reversed(followers):
                if len(tokens) == count:
                    return Children(tuple(tokens), tuple(weights))
                if token not in tokens:
                    tokens.append(token)
                    weights.append(scale * shares[token] / len(followers))
            scale *= 0.5
        return Children(tuple(tokens), tuple(weights))
