"""Per-request acceptance posteriors: the profile's acceptance as a prior, a request's own rounds
as data (docs/planner-math.md section 12.1).

Two conjugate models, one per statistic the planner reads:

- the chain histogram (``accepted_hist``, section 1) is a categorical over ``a = 0..G``
  accepted draft tokens per G-chain round; its posterior is Dirichlet with the profile's
  histogram, scaled to ``weight`` pseudo-rounds, as prior. The alpha the planner reads back
  (accepted / (accepted + rejections), Leviathan et al., arXiv 2211.17192) is then the mean of a
  Beta posterior whose prior counts are the prior's accepted tokens and rejections;
- Sequoia's rank vector (``rank_accept``, arXiv 2402.12374, section 2.1) is a categorical over
  "the k-th ranked child is accepted" and "no child"; its posterior is Dirichlet with prior
  ``weight * (p_1..p_W, 1 - sum p)``.

With no data the posterior means are the profile's numbers exactly, so a re-solve from them
gives the static plan back. A round that accepted every one of its ``g < G`` draft tokens only
says ``A >= g`` (censored): its count is shared among the buckets ``a >= g`` in proportion to
the current posterior there (one expectation step; SmartSpec, arXiv 2406.14066, also updates
its acceptance estimate from such rounds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from specplan.core.profile import AcceptanceEntry


@dataclass(frozen=True)
class LiveCounts:
    """What one request showed of one drafter.

    ``accepted_hist[a]``: replayed G-chain rounds with exactly ``a`` accepted (G = len - 1);
    ``censored[g]``: rounds of a g-chain that accepted all ``g`` tokens (``A >= g``), g < G;
    ``rank_hits[k]``: nodes where the verifier's token was the (k+1)-th candidate; ``positions``:
    the nodes ranked (hits plus "no candidate").
    """

    accepted_hist: tuple[int, ...] = ()
    censored: tuple[int, ...] = ()
    rank_hits: tuple[int, ...] = ()
    positions: int = 0

    @property
    def rounds(self) -> int:
        return sum(self.accepted_hist) + sum(self.censored)


def prior_histogram(entry: AcceptanceEntry, length: int, weight: float) -> list[float]:
    """The entry's histogram scaled to ``weight`` pseudo-rounds over ``a = 0..length - 1``.

    Without a histogram (or of another length), the i.i.d. chain of ``alpha``: P(A = a) =
    alpha^a (1 - alpha) for a < G, alpha^G for a = G (arXiv 2211.17192).

    >>> [round(v, 3) for v in prior_histogram(AcceptanceEntry("d", "t", 0.0, 0.5, 2), 3, 8.0)]
    [4.0, 2.0, 2.0]
    """
    hist = list(entry.accepted_hist)
    if len(hist) != length or sum(hist) <= 0:
        alpha = min(max(entry.alpha, 0.0), 1.0)
        hist = [alpha ** a * (1 - alpha) for a in range(length - 1)] + [alpha ** (length - 1)]
    total = sum(hist)
    return [weight * value / total for value in hist]


def posterior_histogram(entry: AcceptanceEntry, counts: LiveCounts, weight: float) -> tuple[float, ...]:
    """Dirichlet posterior mean counts of the chain histogram (prior + exact rounds + censored
    rounds shared over ``a >= g`` in proportion to the prior-plus-exact counts there).

    >>> entry = AcceptanceEntry("d", "t", 0.0, 0.5, 2, accepted_hist=(2, 1, 1))
    >>> [round(v, 3) for v in posterior_histogram(entry, LiveCounts((0, 0, 4), (0, 2)), 4.0)]
    [2.0, 1.333, 6.667]
    """
    length = len(counts.accepted_hist) or len(entry.accepted_hist) or entry.gamma + 1
    hist = prior_histogram(entry, length, weight)
    for a, count in enumerate(counts.accepted_hist):
        hist[a] += count
    for g, count in enumerate(counts.censored[:length]):
        if count:
            tail = sum(hist[g:])
            shares = [value / tail for value in hist[g:]] if tail > 0 else [1.0] + [0.0] * (length - g - 1)
            for offset, share in enumerate(shares):
                hist[g + offset] += count * share
    return tuple(hist)


def histogram_alpha(hist: Sequence[float]) -> float:
    """accepted / (accepted + rejections) of a (pseudo-)histogram; full-length rounds have no
    rejection (the maximum-likelihood alpha of section 1, here a Beta posterior mean).

    >>> histogram_alpha([2.0, 1.0, 1.0])   # 3 accepted tokens, 3 rejections
    0.5
    """
    accepted = sum(a * count for a, count in enumerate(hist))
    rejections = sum(hist[:-1])
    return accepted / (accepted + rejections) if accepted + rejections > 0 else 0.0


def posterior_ranks(prior: Sequence[float], counts: LiveCounts, weight: float) -> tuple[float, ...]:
    """Dirichlet posterior mean of the rank vector: (weight * p_k + hits_k) / (weight + positions).

    >>> posterior_ranks([0.5, 0.25], LiveCounts(rank_hits=(4, 0), positions=4), 4.0)
    (0.75, 0.125)
    """
    width = max(len(prior), len(counts.rank_hits))
    hits = list(counts.rank_hits) + [0] * (width - len(counts.rank_hits))
    padded = list(prior) + [0.0] * (width - len(prior))
    total = weight + counts.positions
    return tuple((weight * padded[k] + hits[k]) / total for k in range(width))


def posterior_entry(entry: AcceptanceEntry, counts: LiveCounts, weight: float) -> AcceptanceEntry:
    """The entry the planner reads for this request: posterior histogram, its alpha, and the
    posterior rank vector (unchanged where the request showed nothing of that statistic)."""
    hist = posterior_histogram(entry, counts, weight)
    ranks = posterior_ranks(entry.rank_accept, counts, weight) if counts.positions else entry.rank_accept
    return replace(entry, accepted_hist=hist, alpha=histogram_alpha(hist), gamma=len(hist) - 1, rank_accept=ranks,
                   samples=entry.samples + counts.rounds)


def posterior_alpha(entry: AcceptanceEntry, counts: LiveCounts, weight: float) -> float:
    """The posterior entry's alpha alone (what the re-plan trigger watches), without its rank vector.

    >>> entry = AcceptanceEntry("d", "t", 0.0, 0.5, 2, accepted_hist=(2, 1, 1))
    >>> posterior_alpha(entry, LiveCounts((0, 0, 4)), 4.0) == posterior_entry(entry, LiveCounts((0, 0, 4)), 4.0).alpha
    True
    """
    return histogram_alpha(posterior_histogram(entry, counts, weight))
