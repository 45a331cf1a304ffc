"""Expected accepted length: Leviathan's closed form and the histogram form agree."""

from __future__ import annotations

import numpy as np
import pytest

from tests.planner.planner_instances import leviathan, reference_accepted
from specplan.planner.sequence import (
    expected_accepted,
    expected_accepted_from_histogram,
    expected_accepted_length,
    drafted_distribution,
    expected_verify_ms,
    sequence_ms_per_token,
)
from specplan.core.profile import AcceptanceEntry


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 0.9, 0.999, 1.0])
@pytest.mark.parametrize("gamma", [0, 1, 3, 8])
def test_closed_form_is_the_geometric_sum(alpha, gamma):
    assert expected_accepted_length(gamma, alpha) == pytest.approx(leviathan(gamma, alpha), rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_histogram_form(seed):
    rng = np.random.default_rng(seed)
    hist = tuple(int(v) for v in rng.integers(0, 100, size=9))
    entry = AcceptanceEntry("d", "v", 0.0, 0.5, 8, hist)
    for gamma in range(9):
        expected = reference_accepted(entry, gamma)
        assert expected_accepted_from_histogram(hist, gamma) == pytest.approx(expected, rel=1e-12)
        assert expected_accepted(entry, gamma) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_expected_verify_is_the_mean_over_the_rounds(seed):
    """V(gamma) against the rounds themselves: a round that drafted d of G asks for gamma <= G and
    verifies min(d, gamma) + 1 tokens; a model drafter's entry (no drafted_hist) verifies gamma + 1."""
    rng = np.random.default_rng(seed)
    rounds = [int(d) for d in rng.integers(0, 9, size=int(rng.integers(1, 60)))]
    drafted_hist = tuple(rounds.count(d) for d in range(9))
    latency = lambda n: 10.0 + 3.0 * n + (7.0 if n > 4 else 0.0)  # noqa: E731 - a step, as CPUs show
    entry = AcceptanceEntry("ngram-5-3", "target", 0.0, 0.5, 8, (1,) * 9, drafted_hist=drafted_hist)
    for gamma in range(9):
        mean = sum(latency(min(d, gamma) + 1) for d in rounds) / len(rounds)
        assert expected_verify_ms(entry, gamma, latency) == pytest.approx(mean, rel=1e-12)
        assert sum(drafted_distribution(drafted_hist, gamma)) == pytest.approx(1.0)
    model = AcceptanceEntry("model-x", "target", 0.0, 0.5, 8, (1,) * 9)
    assert expected_verify_ms(model, 5, latency) == latency(6)


def test_iid_histogram_matches_alpha():
    """A histogram drawn from i.i.d. Bernoulli(alpha) chains gives Leviathan's E."""
    rng = np.random.default_rng(0)
    alpha, length = 0.7, 8
    accepted = np.minimum(rng.geometric(1 - alpha, size=200000) - 1, length)
    hist = tuple(int(v) for v in np.bincount(accepted, minlength=length + 1))
    for gamma in (1, 4, 8):
        assert expected_accepted_from_histogram(hist, gamma) == pytest.approx(leviathan(gamma, alpha), rel=5e-3)


def test_longer_chains_fall_back_to_alpha():
    entry = AcceptanceEntry("d", "v", 0.0, 0.5, 2, (1, 1, 2))
    assert expected_accepted(entry, 2) == pytest.approx(1 + 0.75 + 0.5)
    assert expected_accepted(entry, 3) == pytest.approx(leviathan(3, 0.5))
    assert expected_accepted(AcceptanceEntry("d", "v", 0.0, 0.5, 2, (0, 0, 0)), 1) == 1.5
    with pytest.raises(ValueError):
        expected_accepted_from_histogram((1, 1), 2)


def test_time_per_token():
    assert sequence_ms_per_token(4, 2.0, 30.0, 2.5) == pytest.approx(38.0 / 2.5)


def _lookup_profile(chain: int):
    """A target whose verify is nearly flat and a match-only lookup profiled at chain length ``chain``:
    every round drafts the whole chain and 95% of each position is accepted."""
    from specplan.core.profile import DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry

    n = (1, 2, 4, 8, 16, 24, 32, 48, 64)
    target = ModelEntry("target", "t", "sha256:x", role="target", latency=(LatencyCurve(256, n, tuple(10.0 + 0.05 * k for k in n)),))
    reach = [0.95 ** a for a in range(chain + 1)]
    hist = tuple(round(10_000 * (reach[a] - (reach[a + 1] if a < chain else 0.0))) for a in range(chain + 1))
    drafted = tuple([0] * chain + [sum(hist)])
    entry = AcceptanceEntry("ngram-8-3", "target", 0.0, 0.95, chain, hist, drafted_hist=drafted)
    return Profile(DeviceInfo("cpu", "cpu", "cpu"), (target,), (entry,), (RetrievalEntry("ngram-8-3", "ngram:8:3", 0.01),))


@pytest.mark.filterwarnings("ignore::specplan.planner.PlannerWarning")  # the lookup has no tree statistics
def test_a_lookup_profiled_with_longer_chains_is_planned_with_them():
    """`specplan plan` (runtime options, --max-depth 8) may choose a chain up to the profiled 16, never
    beyond what was measured: a pair profiled at 8 stays at 8 or less."""
    from specplan.planner.options import runtime_options
    from specplan.planner.solve import solve_plan

    long_chain = solve_plan(_lookup_profile(16), runtime_options()).plan.stages[-1].shape
    short_chain = solve_plan(_lookup_profile(8), runtime_options()).plan.stages[-1].shape
    assert long_chain.kind == "sequence" and 8 < long_chain.gamma <= 16
    assert short_chain.kind != "sequence" or short_chain.gamma <= 8

