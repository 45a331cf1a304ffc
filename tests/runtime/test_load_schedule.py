"""Rounds that follow the load (runtime/load_schedule.py, docs/planner-math.md section 11.5): the
schedule row for the requests decoding together picks plain decoding or the chain's length, and
the output stays the target's greedy decoding whatever the load does between rounds."""

from __future__ import annotations

import itertools

import torch

from specplan.core.plan import Stage, StageShape
from specplan.core.schedule import Schedule, ScheduleRow
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.model import ModelDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.fallback import FallbackGuard
from specplan.runtime.load_schedule import LoadChoice, LoadSchedule, load_choices
from specplan.runtime.stage import StageRunner
from tests.runtime.test_engine import reference_greedy
from tests.runtime.tiny_models import tiny_llama

CPU = torch.device("cpu")
PROMPT = [1, 5, 9, 5, 9, 5, 9, 12]
PLAN, SHORT = LoadChoice(1, False, None, "plan"), LoadChoice(2, False, 1, "chain of 1")
PLAIN = LoadChoice(4, True, None, "plain decoding")


def chain(drafter: str, gamma: int) -> tuple[Stage, ...]:
    return (Stage(drafter, "target", StageShape("sequence", gamma=gamma)),)


def engine_under(load, guard: FallbackGuard | None = None) -> tuple[SpeculativeEngine, torch.nn.Module]:
    target = tiny_llama("sdpa", seed=0)
    engine = SpeculativeEngine(target, CPU, eos_ids=set(), drafter=ModelDrafter("model", target, CPU), gamma=4,
                               guard=guard)
    engine.load = LoadSchedule((PLAN, SHORT, PLAIN), load)
    return engine, target


def test_the_row_of_the_largest_scheduled_load_at_most_the_current_one_plays():
    loads = iter([1, 2, 3, 4, 9, 0])
    schedule = LoadSchedule((PLAIN, PLAN, SHORT), lambda: next(loads))
    assert [schedule.choice() for _ in range(6)] == [PLAN, SHORT, SHORT, PLAIN, PLAIN, PLAN]


def test_a_loaded_server_plays_plain_rounds_and_the_output_is_the_targets():
    """The drafter is the target itself: alone every round commits its whole chain of 4 plus the
    bonus; under a load whose row is plain decoding every round commits one token."""
    engine, target = engine_under(lambda: 4)
    result = engine.generate(PROMPT, 24, SamplingConfig())
    assert list(result.token_ids) == reference_greedy(target, PROMPT, 24)
    assert set(result.committed_per_forward) == {1}
    engine.load = LoadSchedule((PLAN, SHORT, PLAIN), lambda: 1)
    assert max(engine.generate(PROMPT, 24, SamplingConfig()).committed_per_forward) == 5


def test_a_row_with_a_shorter_chain_drafts_that_many_and_the_plan_comes_back_when_the_load_falls():
    loads = itertools.cycle([2, 2, 1])
    engine, target = engine_under(lambda: next(loads))
    result = engine.generate(PROMPT, 40, SamplingConfig())
    assert list(result.token_ids) == reference_greedy(target, PROMPT, 40)
    assert set(result.committed_per_forward) <= {2, 5} and {2, 5} <= set(result.committed_per_forward)


def test_a_loads_plain_rounds_do_not_count_as_the_guards():
    guard = FallbackGuard(plain_ms=1000.0, cost=lambda played, seconds, tokens: 1.0)
    engine, target = engine_under(lambda: 4, guard)
    result = engine.generate(PROMPT, 16, SamplingConfig())
    assert list(result.token_ids) == reference_greedy(target, PROMPT, 16)
    assert result.plain_rounds == 0 and not guard.window


def test_rows_become_choices_the_plans_engine_can_play():
    rows = (ScheduleRow(1, "six", chain("ngram-5", 6), 1.0, 1.0, 1.0, 1.0, 1.0, 1.0),
            ScheduleRow(2, "three", chain("ngram-5", 3), 1.0, 1.0, 1.0, 1.0, 1.0, 0.9),
            ScheduleRow(4, "other drafter", chain("ngram-3", 2), 1.0, 1.0, 1.0, 1.0, 1.0, 0.9),
            ScheduleRow(8, "plain", (), 1.0, 1.0, 1.0, 1.0, 1.0, 0.9),
            ScheduleRow(16, "faster plan", chain("ngram-5", 2), 1.0, 1.0, 1.0, 1.0, 1.0, 1.5),
            ScheduleRow(32, "plan not costed", (), 1.0, 1.0, 1.0, 1.0, 1.0, 0.0),
            ScheduleRow(64, "plain: no speculation pays with a margin", (), 1.0, 1.0, 1.0, 1.0, 1.0, 1.5))
    from specplan.core.plan import Plan

    plan = Plan("", "", {}, "target", 0.0, chain("ngram-5", 6), None)
    choices = load_choices(plan, Schedule(rows, 8))
    assert [(c.batch, c.plain, c.gamma) for c in choices] == [(1, False, None), (2, False, 3), (4, False, None),
                                                              (8, True, None), (16, False, None), (32, True, None),
                                                              (64, True, None)]
    assert "needs another engine" in choices[2].played and "not costed" in choices[5].played


def test_a_row_of_other_stages_plays_on_the_engines_target_session_when_the_engine_can_build_it():
    """The row at load 2 is another stage (here the target drafting for itself, a chain of 1: every round commits
    2 tokens); the engine builds it once, over its own target session, and the plan comes back at load 1."""
    loads = itertools.cycle([2, 2, 1])
    engine, target = engine_under(lambda: next(loads))
    row = chain("other", 1)
    built = []

    def build(stages):
        built.append(stages)
        return StageRunner(engine.target, ModelDrafter("other", target, CPU), gamma=1, names=("other", "target"))

    engine.row_builder = build
    engine.load = LoadSchedule((PLAN, LoadChoice(2, False, None, "other, chain of 1", row)), lambda: next(loads))
    for _ in range(2):
        result = engine.generate(PROMPT, 40, SamplingConfig())
        assert list(result.token_ids) == reference_greedy(target, PROMPT, 40)
        assert {2, 5} <= set(result.committed_per_forward[:-1]) <= {2, 5}  # the last round: what the budget leaves
    assert built == [row]  # built once, kept across requests


def test_lookup_rows_are_played_and_other_rows_keep_the_plan():
    """With ``can_play`` (runtime/build.py ``lookup_rows``: one ngram stage into the target, no graft) a row of
    another lookup drafter or shape is played as itself; a model drafter's row still plays the plan."""
    from specplan.core.plan import Plan
    from specplan.core.profile import DeviceInfo, ModelEntry, Profile, RetrievalEntry
    from specplan.runtime.build import build_rows_for, lookup_rows
    from specplan.runtime.drafters.ngram_tree import NgramTreeDrafter

    target_entry = ModelEntry("target", "HuggingFaceTB/SmolLM2-135M-Instruct", "", role="target")
    drafter_entry = ModelEntry("draft", "model:x", "", role="drafter")
    profile = Profile(DeviceInfo("cpu", "test", None), (target_entry, drafter_entry), (),
                      (RetrievalEntry("ngram-3", "ngram:3", 0.1), RetrievalEntry("ngram-5", "ngram:5", 0.1)))
    tree = (Stage("ngram-3", "target", StageShape("tree", parents=(-1, 0, 0))),)
    rows = (ScheduleRow(1, "plan", chain("ngram-5", 4), 1.0, 1.0, 1.0, 1.0, 1.0, 1.0),
            ScheduleRow(2, "tree", tree, 1.0, 1.0, 1.0, 1.0, 1.0, 0.9),
            ScheduleRow(4, "model", chain("draft", 2), 1.0, 1.0, 1.0, 1.0, 1.0, 0.9))
    plan = Plan("", "", {}, "target", 0.0, chain("ngram-5", 4), None)
    choices = load_choices(plan, Schedule(rows, None), lookup_rows(profile, plan))
    assert choices[1].stages == tree and choices[1].played == "tree"
    assert not choices[2].stages and "needs another engine" in choices[2].played
    engine, target = engine_under(lambda: 2)
    engine.load = LoadSchedule(choices, lambda: 2)
    build_rows_for(engine, profile, None, CPU)
    result = engine.generate(PROMPT, 24, SamplingConfig())
    assert list(result.token_ids) == reference_greedy(target, PROMPT, 24)
    (stage,) = engine.row_stages.values()
    assert isinstance(stage.drafter, NgramTreeDrafter) and stage.verifier is engine.target
