"""A chain stage over a finite answer: the budget's end (docs/planner-math.md section 1, "A finite answer").

Section 1's ``L = (gamma * t_draft + V(gamma)) / E(gamma)`` is the long-run time per token of an
endless answer (renewal-reward, arXiv 2211.17192's i.i.d. rounds). An answer of ``H`` tokens ends:
the runtime caps a round that starts with ``r`` tokens left at a chain of ``min(gamma, r - 1)``
(runtime/stage.py), so no round commits past the budget, and the rounds near the end are shorter.
For a lookup that copies in chains of up to 63 that end is a large share of a 128-token answer.

With rounds i.i.d. given their cap (the model section 1 already makes), the expected totals
over the answer follow from the tokens left ``r``, with ``g = min(gamma, r - 1)``::

    rounds(r)  = 1     + sum_a P(A_g = a) * rounds(r - a - 1),      rounds(0) = 0
    verify(r)  = V(g)  + sum_a P(A_g = a) * verify(r - a - 1)
    drafted(r) = g     + sum_a P(A_g = a) * drafted(r - a - 1)

where ``P(A_g >= a) = P(A_G >= a)`` for ``a <= g`` (section 1). The answer costs
``drafted(H) * t_draft + verify(H)`` for ``H`` tokens, so per round, as the DP reads a stage:
``E_H = H / rounds(H)``, ``V_H = verify(H) / rounds(H)``, ``gamma_H = drafted(H) / rounds(H)``, and
``L_H = (gamma_H * t_draft + V_H) / E_H``. As ``H`` grows, ``L_H`` tends to ``L``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specplan.core.errors import PlanError
from specplan.core.limits import check_count
from specplan.core.plan import Plan
from specplan.core.profile import AcceptanceEntry, Profile

from .sequence import expected_verify_ms

# The longest answer a plan is costed over (`specplan plan --horizon`): the recursion is O(H * gamma)
# per chain length, and past a few thousand tokens L_H is within a per cent of the steady state.
MAX_HORIZON = 4096


@dataclass(frozen=True)
class HorizonChain:
    """Per-round means of a ``gamma`` chain over an answer of ``horizon`` tokens."""

    gamma: int
    horizon: int
    rounds: float  # expected rounds to commit the answer
    accepted: float  # E_H: tokens committed per round, bonus included
    verify_ms: float  # V_H: the verify forward's expected ms per round
    drafted: float  # gamma_H: draft tokens asked for per round


def survival(entry: AcceptanceEntry, gamma: int) -> Callable[[int], float]:
    """``a -> P(A_G >= a)`` for a chain of ``gamma``: the entry's histogram where it covers gamma, else
    ``alpha ** a`` (the rule of :func:`~specplan.planner.sequence.expected_accepted`)."""
    hist = entry.accepted_hist
    total = sum(hist) if hist else 0
    if total > 0 and gamma < len(hist):
        tail = np.cumsum(np.asarray(hist, dtype=float)[::-1])[::-1] / total  # tail[a] = P(A_G >= a)
        return lambda a: float(tail[a]) if a < len(tail) else 0.0
    return lambda a: float(entry.alpha) ** a


def accepted_distribution(at_least: Callable[[int], float], cap: int) -> np.ndarray:
    """``P(A_cap = a)``, a = 0..cap: a chain of ``cap`` accepts ``a < cap`` as the longer chain does,
    and all of it when the longer chain accepts at least ``cap``."""
    tail = np.array([at_least(a) for a in range(cap + 1)] + [0.0])
    shares = tail[:-1] - tail[1:]
    shares[cap] = tail[cap]
    return shares


def horizon_chain(entry: AcceptanceEntry, gamma: int, horizon: int, latency: Callable[[int], float]) -> HorizonChain:
    """The per-round means of a ``gamma`` chain verified at ``latency`` over a ``horizon``-token answer.

    >>> always = AcceptanceEntry("ngram-5", "target", 0.0, 1.0, 8, (0,) * 8 + (10,))
    >>> chain = horizon_chain(always, 8, 20, lambda n: 10.0 + n)   # 9 + 9, then a chain of 1 for the last 2
    >>> (chain.rounds, chain.accepted, chain.verify_ms, chain.drafted)
    (3.0, 6.666666666666667, 16.666666666666668, 5.666666666666667)
    """
    at_least = survival(entry, gamma)
    totals = np.zeros((horizon + 1, 3))  # [tokens left] -> (rounds, verify ms, draft tokens) to the end
    per_round: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # cap -> (P(A_cap = a), this round's terms)
    for left in range(1, horizon + 1):
        cap = min(gamma, left - 1)
        if cap not in per_round:
            per_round[cap] = (accepted_distribution(at_least, cap),
                              np.array([1.0, expected_verify_ms(entry, cap, latency), cap]))
        shares, terms = per_round[cap]
        totals[left] = terms + shares @ totals[left - 1 - cap:left][::-1]  # a round commits 1 ... cap + 1
    rounds, verify, drafted = (float(value) for value in totals[horizon])
    return HorizonChain(gamma, horizon, rounds, horizon / rounds, verify / rounds, drafted / rounds)


def plan_horizon(plan: Plan) -> int | None:
    """The answer length a plan was solved for (``solver.horizon``, ``plan --horizon``), checked; None: endless."""
    value = plan.solver.get("horizon")
    if value is None:
        return None
    try:
        return check_count(value, "the plan's solver.horizon", 1, MAX_HORIZON)
    except ValueError as error:
        raise PlanError(f"{error}; re-solve the plan with `specplan plan`") from None


def calibration_horizon(profile: Profile) -> int | None:
    """The answer length ``specplan plan`` costs chains over by default: the calibration's (its
    ``max_new_tokens``), the answers the profile's acceptance was counted on; None where the profile
    does not say (a latency-only profile), which costs the steady state.

    On the home EPYC's pair profiles (40 calibration prompts x 128 tokens) the steady state predicted
    93.1 and 85.2 tok/s for the HumanEval and edit plans, where replaying each plan's rounds over the
    same calibration answers gave 85.5 and 77.7; costed over 128-token answers the plans predict 84.5
    and 77.6 (docs/results.md, "Where the diagonal predictions went wrong")."""
    value = profile.calibration.get("max_new_tokens")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_HORIZON:
        return None
    return value
