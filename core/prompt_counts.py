"""Acceptance counted per calibration prompt, and pooled again over any multiset of prompts.

A profile's acceptance entry pools every calibration prompt's rounds (profiler/acceptance.py). Its
``per_prompt`` counts keep each prompt's share, so that the planner can resample the prompts with
replacement and re-cost a plan on each resample: the spread of its prediction over the prompts it
was calibrated on (docs/planner-math.md section 9.2). Pooling a resample recomputes every statistic
the planner reads exactly as the profiler computed it from all the prompts: the accepted-length
histogram completed over censored rounds (Kaplan & Meier, JASA 1958; section 1), Leviathan et al.'s
per-token rate (arXiv 2211.17192) and Sequoia's rank acceptance (arXiv 2402.12374). No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specplan.core.profile import AcceptanceEntry


@dataclass(frozen=True)
class PromptCounts:
    """One prompt's replay counts: rounds by accepted length (``hist``), rounds cut by the output's end
    by matched length (``censored``), rounds by drafted length (``drafted_hist``, retrieval drafters;
    empty: every round drafted gamma), and tree-round nodes reached (``positions``) with the rank of
    the verifier's token among them (``rank_hits``). Lists may stop at their last non-zero count."""

    hist: tuple[int, ...] = ()
    censored: tuple[int, ...] = ()
    drafted_hist: tuple[int, ...] = ()
    rank_hits: tuple[int, ...] = ()
    positions: int = 0

    def minus(self, before: "PromptCounts") -> "PromptCounts":
        """The counts added since ``before`` (running totals of the same counter)."""
        return PromptCounts(_minus(self.hist, before.hist), _minus(self.censored, before.censored),
                            _minus(self.drafted_hist, before.drafted_hist), _minus(self.rank_hits, before.rank_hits),
                            self.positions - before.positions)

    def trimmed(self) -> "PromptCounts":
        """The same counts with every list cut after its last non-zero count (how a profile stores them)."""
        return PromptCounts(_trim(self.hist), _trim(self.censored), _trim(self.drafted_hist), _trim(self.rank_hits),
                            self.positions)


def _minus(after: Sequence[int], before: Sequence[int]) -> tuple[int, ...]:
    return tuple(a - (before[i] if i < len(before) else 0) for i, a in enumerate(after))


def _trim(counts: Sequence[int]) -> tuple[int, ...]:
    end = len(counts)
    while end and not counts[end - 1]:
        end -= 1
    return tuple(counts[:end])


def _sum(lists: Sequence[Sequence[int]], length: int) -> list[int]:
    total = [0] * length
    for counts in lists:
        for index, count in enumerate(counts):
            total[index] += count
    return total


def completed_histogram(exact: Sequence[int], censored: Sequence[int]) -> list[int]:
    """Rounds by accepted length 0..G from ``exact[a]`` (rounds that accepted a) and
    ``censored[c]`` (rounds known only to accept at least c): the product-limit estimate of
    P(A = a) (Kaplan & Meier, JASA 1958) times every round, rounded to whole rounds by largest
    remainder so the total stays. A round censored at c passed positions 0..c-1: it is at risk
    at k < c and unobserved from c on.

    >>> completed_histogram([1, 1, 0, 2], [0, 0, 0, 0])
    [1, 1, 0, 2]
    >>> completed_histogram([2, 0, 0, 2], [0, 0, 4, 0])    # 4 rounds matched 2, then the output ended
    [2, 0, 0, 6]
    """
    gamma = len(exact) - 1
    total = sum(exact) + sum(censored)
    if not sum(censored):
        return list(exact)
    survival, shares = 1.0, []
    for k in range(gamma):
        at_risk = sum(exact[k:]) + sum(censored[k + 1:])
        hazard = exact[k] / at_risk if at_risk else 0.0
        shares.append(survival * hazard)
        survival *= 1.0 - hazard
    shares.append(survival)
    counts = [int(share * total) for share in shares]
    remainders = sorted(range(gamma + 1), key=lambda a: counts[a] - shares[a] * total)
    for a in remainders[: total - sum(counts)]:
        counts[a] += 1
    return counts


def chain_alpha(exact: Sequence[int], censored: Sequence[int]) -> float:
    """The per-token acceptance that maximises the likelihood of the rounds under Leviathan et al.'s
    i.i.d. model (arXiv 2211.17192): accepted / (accepted + rejections); a full-gamma round has no
    rejection, a censored round's matched tokens count as accepted with none.

    >>> chain_alpha([1, 1, 2], [0, 0, 0])    # 0 + 1 + 4 accepted, 2 rejections
    0.7142857142857143
    """
    accepted = sum(a * count for a, count in enumerate(exact)) + sum(c * count for c, count in enumerate(censored))
    rejections = sum(exact[:-1])
    return accepted / (accepted + rejections) if accepted + rejections else 0.0


def pooled_entry(entry: "AcceptanceEntry", prompts: Sequence[int]) -> "AcceptanceEntry":
    """``entry`` as if its profile had calibrated on ``prompts`` (indices into ``entry.per_prompt``,
    repeats allowed): histograms, rate and rank acceptance pooled over them (:func:`entry_from_totals`).
    Plain Python, one prompt at a time: the reference that the planner's vectorised pooling of a draw
    (planner/spread.py) is tested against, as the DP is against brute force."""
    chosen = [entry.per_prompt[index] for index in prompts]
    length = entry.gamma + 1
    totals = PromptCounts(tuple(_sum([c.hist for c in chosen], length)), tuple(_sum([c.censored for c in chosen], length)),
                          tuple(_sum([c.drafted_hist for c in chosen], length)),
                          tuple(_sum([c.rank_hits for c in chosen], len(entry.rank_accept))),
                          sum(c.positions for c in chosen))
    return entry_from_totals(entry, totals)


def entry_from_totals(entry: "AcceptanceEntry", totals: PromptCounts) -> "AcceptanceEntry":
    """``entry`` with every statistic recomputed from ``totals`` (counts summed over some prompts, lists of
    full length), as the profiler computes them from all of its prompts. Graft's ``retrieval_rank_accept``
    is kept as measured (its counts are not kept per prompt)."""
    accepted_hist = tuple(completed_histogram(totals.hist, totals.censored))
    positions = totals.positions
    rank_accept = tuple(hit / positions if positions else 0.0 for hit in totals.rank_hits)
    return replace(entry, alpha=chain_alpha(totals.hist, totals.censored), accepted_hist=accepted_hist,
                   rank_accept=rank_accept, samples=sum(accepted_hist),
                   drafted_hist=tuple(totals.drafted_hist) if entry.drafted_hist else (), per_prompt=())
