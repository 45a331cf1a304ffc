"""Fixtures shared by the planner tests."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from specplan.core.profile import load_profile
from specplan.planner.adaptive_plan import make_adaptive
from specplan.planner.options import runtime_options
from specplan.planner.solve import solve_plan

STORED = Path(__file__).resolve().parents[2] / "profiles" / "cpu"


@pytest.fixture(scope="module")
def solved():
    """The stored default profile and the adaptive plan solved from it."""
    profile = load_profile(STORED / "profile.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = solve_plan(profile, runtime_options())
    return profile, make_adaptive(result.plan, result.candidates, profile)
