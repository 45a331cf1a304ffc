"""`run` and `bench` use the runtime the plan's profile measured unless told otherwise."""

from __future__ import annotations

import argparse
from dataclasses import replace

import pytest

from specplan.cli.options import chosen_runtime
from specplan.runtime.runner import profiled_runtime
from tests.core.test_formats import make_profile


@pytest.mark.parametrize("mode, expected", [("compiled", "compiled"), ("eager", "eager")])
def test_the_profiled_runtime_is_the_targets_mode(mode, expected):
    profile = make_profile()
    target = replace(profile.models[0], mode=mode)
    profile = replace(profile, models=(target, *profile.models[1:]))
    assert profiled_runtime(profile).name == expected


def test_no_flag_and_no_variable_leave_the_choice_to_the_plan(monkeypatch):
    monkeypatch.delenv("SPECPLAN_RUNTIME", raising=False)
    assert chosen_runtime(argparse.Namespace(runtime=None)) is None


def test_the_flag_or_the_variable_choose(monkeypatch):
    monkeypatch.delenv("SPECPLAN_RUNTIME", raising=False)
    assert chosen_runtime(argparse.Namespace(runtime="static")).name == "static"
    monkeypatch.setenv("SPECPLAN_RUNTIME", "compiled")
    assert chosen_runtime(argparse.Namespace(runtime=None)).name == "compiled"
    assert chosen_runtime(argparse.Namespace(runtime="eager")).name == "eager"  # the flag wins
