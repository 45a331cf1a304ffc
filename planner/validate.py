"""Typed planner errors and input checks for profiles built by hand (not loaded from YAML).

:func:`specplan.core.profile.load_profile` already validates a profile read from disk; tests and
scripts also build :class:`~specplan.core.profile.Profile` instances directly, so the planner checks
again before it solves: every probability is a number in [0, 1], every histogram count is
non-negative, every latency is positive.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from specplan.core.errors import PlanError
from specplan.core.profile import AcceptanceEntry, ModelEntry, Profile, RetrievalEntry


class PlannerInputError(PlanError):
    """A profile value the planner cannot use (NaN, negative or > 1 probability, bad latency)."""


class NoCandidatesError(PlanError):
    """Not even plain decoding of the target can be costed (no target latency curve)."""


class PlannerWarning(UserWarning):
    """A candidate was skipped (missing data) or a latency was extrapolated."""


def check_probability(value: float, where: str) -> float:
    """Return ``value`` as a float if it is a probability, else raise :class:`PlannerInputError`.

    Examples
    --------
    >>> check_probability(0.5, "alpha")
    0.5
    >>> check_probability(float("nan"), "alpha")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    ...
    PlannerInputError: alpha = nan is not a probability in [0, 1]; fix or re-profile it
    """
    number = float(value)
    if math.isnan(number) or number < 0.0 or number > 1.0:
        raise PlannerInputError(f"{where} = {value!r} is not a probability in [0, 1]; fix or re-profile it")
    return number


def check_probabilities(values: Iterable[float], where: str) -> tuple[float, ...]:
    """Check each entry of a probability vector (rank acceptance); return them as floats."""
    return tuple(check_probability(value, f"{where}[{index}]") for index, value in enumerate(values))


def _check_acceptance(entry: AcceptanceEntry) -> None:
    where = f"acceptance {entry.drafter} -> {entry.verifier}"
    check_probability(entry.alpha, f"{where}: alpha")
    check_probabilities(entry.rank_accept, f"{where}: rank_accept")
    check_probabilities(entry.retrieval_rank_accept, f"{where}: retrieval_rank_accept")
    if any(count < 0 for count in entry.accepted_hist):
        raise PlannerInputError(f"{where}: accepted_hist has a negative count; fix or re-profile it")
    if math.isnan(entry.temperature) or entry.temperature < 0:
        raise PlannerInputError(f"{where}: temperature {entry.temperature} must be >= 0")


def _check_model(model: ModelEntry) -> None:
    for curve in model.latency:
        where = f"model {model.id}: latency at context {curve.context}"
        if len(curve.n) != len(curve.ms) or not curve.n:
            raise PlannerInputError(f"{where}: n and ms must be non-empty and of equal length")
        if any(math.isnan(ms) or ms <= 0 for ms in curve.ms):
            raise PlannerInputError(f"{where}: every ms must be a positive number, got {list(curve.ms)}")
        if list(curve.n) != sorted(set(curve.n)) or curve.n[0] < 1:
            raise PlannerInputError(f"{where}: n must be strictly increasing and >= 1, got {list(curve.n)}")


def _check_retrieval(entry: RetrievalEntry) -> None:
    if math.isnan(entry.ms_per_call) or entry.ms_per_call < 0:
        raise PlannerInputError(f"retrieval {entry.id}: ms_per_call {entry.ms_per_call} must be >= 0")


def validate_profile(profile: Profile) -> None:
    """Raise :class:`PlannerInputError` naming the first value the planner cannot use.

    Missing data (no latency curve, no acceptance entry) is not an error here: the solver
    skips the candidates that need it and says so.
    """
    for model in profile.models:
        _check_model(model)
    for entry in profile.retrieval:
        _check_retrieval(entry)
    for entry in profile.acceptance:
        _check_acceptance(entry)
