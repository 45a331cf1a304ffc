"""A sequence stage: gamma draft tokens in a chain, verified in one forward.

Expected accepted length (bonus included) with i.i.d. acceptance alpha (Leviathan et al.,
arXiv 2211.17192)::

    E(gamma, alpha) = (1 - alpha^(gamma + 1)) / (1 - alpha)

or, from a measured histogram of accepted draft tokens (docs/planner-math.md section 1)::

    E = sum_{a=0..gamma} P(A >= a)

and the time per committed token of the stage::

    L = (gamma * t_draft + T_v(gamma + 1)) / E

where t_draft is the time per draft token (a model drafter's L*(j), a retrieval call). A
retrieval drafter's lookup may find fewer than gamma tokens to propose, or none; the round then
verifies only what it drafted, so T_v(gamma + 1) becomes its expectation over the drafted
length D (``expected_verify_ms``, docs/planner-math.md section 1)::

    V(gamma) = sum_{k=0..gamma} P(D_gamma = k) * T_v(k + 1)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from specplan.core.profile import AcceptanceEntry


def expected_accepted_length(gamma: int, alpha: float) -> float:
    """Leviathan's E(gamma, alpha), bonus token included (arXiv 2211.17192, eq. 1).

    Parameters
    ----------
    gamma : int
        Draft length, >= 0.
    alpha : float
        Per-token acceptance probability in [0, 1].

    Returns
    -------
    float
        ``(1 - alpha^(gamma+1)) / (1 - alpha)``, and ``gamma + 1`` at ``alpha = 1``.

    Examples
    --------
    >>> expected_accepted_length(3, 0.5)
    1.875
    >>> expected_accepted_length(3, 1.0)
    4.0
    """
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_accepted_from_histogram(accepted_hist: Sequence[int], gamma: int) -> float:
    """E = sum_{a=0..gamma} P(A >= a) from chains of the profile's length G.

    ``accepted_hist[a]`` counts chains of G = len(accepted_hist) - 1 draft tokens with exactly
    ``a`` accepted. A chain of ``gamma <= G`` accepts at least ``a <= gamma`` tokens iff the
    first ``a`` tokens of the longer chain were accepted, so P(A_gamma >= a) = P(A_G >= a).

    Parameters
    ----------
    accepted_hist : sequence of int
        Counts for a = 0..G, not all zero.
    gamma : int
        Draft length, ``0 <= gamma <= G``.

    Returns
    -------
    float
        Expected accepted length including the bonus token.

    Examples
    --------
    >>> expected_accepted_from_histogram([2, 1, 1], 2)   # P(A>=1) = 1/2, P(A>=2) = 1/4
    1.75
    >>> expected_accepted_from_histogram([2, 1, 1], 1)
    1.5
    """
    total = sum(accepted_hist)
    if total <= 0:
        raise ValueError("accepted_hist is empty or all zero")
    if not 0 <= gamma < len(accepted_hist):
        raise ValueError(f"gamma {gamma} is outside the histogram's range 0..{len(accepted_hist) - 1}")
    at_least = total
    expected = 0.0
    for accepted in range(gamma + 1):
        expected += at_least / total
        at_least -= accepted_hist[accepted]
    return expected


def expected_accepted(entry: AcceptanceEntry, gamma: int) -> float:
    """E for a chain of ``gamma`` from the entry: its histogram if it covers gamma, else alpha."""
    if entry.accepted_hist and sum(entry.accepted_hist) > 0 and gamma < len(entry.accepted_hist):
        return expected_accepted_from_histogram(entry.accepted_hist, gamma)
    return expected_accepted_length(gamma, entry.alpha)


def drafted_distribution(drafted_hist: Sequence[int], gamma: int) -> tuple[float, ...]:
    """P(D_gamma = k), k = 0..gamma, from rounds of a G-chain (``drafted_hist[d]``, d = 0..G).

    A lookup asked for gamma <= G tokens proposes min(D_G, gamma) of them (it returns a prefix
    of the continuation it found), so P(D_gamma = k) = P(D_G = k) for k < gamma and
    P(D_gamma = gamma) = P(D_G >= gamma).

    >>> drafted_distribution([2, 0, 1, 1], 2)   # 4 rounds: 2 drafted none, 1 drafted 2, 1 drafted 3
    (0.5, 0.0, 0.5)
    """
    total = sum(drafted_hist)
    if total <= 0 or not 0 <= gamma < len(drafted_hist):
        raise ValueError(f"drafted_hist {tuple(drafted_hist)} has no rounds or does not cover gamma {gamma}")
    below = [count / total for count in drafted_hist[:gamma]]
    return (*below, sum(drafted_hist[gamma:]) / total)


def expected_verify_ms(entry: AcceptanceEntry, gamma: int, latency: Callable[[int], float]) -> float:
    """V(gamma): the verify forward's expected ms, T_v(gamma + 1) when every round drafts gamma.

    With the entry's ``drafted_hist`` covering gamma it is sum_k P(D_gamma = k) T_v(k + 1)
    (:func:`drafted_distribution`); a model drafter always drafts gamma.
    """
    hist = entry.drafted_hist
    if not hist or sum(hist) <= 0 or gamma >= len(hist):
        return latency(gamma + 1)
    return sum(share * latency(k + 1) for k, share in enumerate(drafted_distribution(hist, gamma)) if share > 0)


def sequence_ms_per_token(gamma: int, draft_ms: float, verify_ms: float, accepted: float) -> float:
    """L = (gamma * t_draft + T_v(gamma + 1)) / E (arXiv 2211.17192).

    Parameters
    ----------
    gamma : int
        Draft length.
    draft_ms : float
        Time per draft token (``L*(j)`` of the drafter's sub-hierarchy, or a retrieval call).
    verify_ms : float
        ``T_v(gamma + 1)``.
    accepted : float
        Expected accepted length E, bonus included (>= 1).

    Examples
    --------
    >>> sequence_ms_per_token(3, 2.0, 12.0, 1.875)
    9.6
    """
    return (gamma * draft_ms + verify_ms) / accepted
