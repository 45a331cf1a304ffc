"""The spread of a plan's prediction over its calibration prompts (docs/planner-math.md section 9.2):
per-prompt counts pool back to the profile's own entry, identical prompts leave no spread, prompts
that copy or do not spread the prediction around its point, and profiles without the counts still
plan as before."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from specplan.core.errors import ProfileError
from specplan.core.plan import floor_phrase
from specplan.core.profile import (AcceptanceEntry, DeviceInfo, ModelEntry, Profile, RetrievalEntry, load_profile,
                                   profile_from_dict, profile_to_dict, save_profile)
from specplan.core.prompt_counts import pooled_entry
from specplan.planner.solve import PlanOptions, solve_plan
from specplan.profiler.acceptance import AcceptanceCounter
from tests.planner.planner_instances import linear_curve

GAMMA = 4
OPTIONS = PlanOptions(max_budget=8, max_depth=GAMMA, shapes=("sequence",))


def counter_entry(counter: AcceptanceCounter) -> AcceptanceEntry:
    """The profile entry of a counter, as profiler/run.py writes it."""
    hist = counter.accepted_hist
    return AcceptanceEntry("ngram-3", "target", 0.0, counter.alpha, counter.gamma, hist, counter.rank_accept,
                           samples=sum(hist), drafted_hist=tuple(counter.drafted_hist), per_prompt=tuple(counter.prompts))


def random_counter(seed: int, prompts: int = 6) -> AcceptanceCounter:
    """Rounds of every kind (exact, censored, fewer drafted than gamma, tree ranks), prompt by prompt."""
    rng = random.Random(seed)
    counter = AcceptanceCounter(GAMMA, width=3)
    for _ in range(prompts):
        for _ in range(rng.randint(0, 12)):
            drafted = rng.randint(1, GAMMA)
            if rng.random() < 0.2 and drafted > 1:
                counter.add_censored(rng.randint(0, drafted - 1), drafted)
            else:
                counter.add_chain(rng.randint(0, drafted), drafted)
        counter.add_ranks([rng.randint(-1, 2) for _ in range(rng.randint(0, 9))])
        counter.end_prompt()
    return counter


@pytest.mark.parametrize("seed", range(5))
def test_pooling_every_prompt_gives_back_the_profile_entry(seed):
    entry = counter_entry(random_counter(seed))
    assert len(entry.per_prompt) == 6
    assert pooled_entry(entry, range(6)) == replace(entry, per_prompt=())
    twice = pooled_entry(entry, [0, 0])
    once = pooled_entry(entry, [0])
    assert twice.samples == 2 * once.samples and twice.alpha == pytest.approx(once.alpha)


@pytest.mark.parametrize("seed", range(3))
def test_the_planner_pools_a_draw_as_the_profile_pools_its_prompts(seed):
    import numpy as np

    from specplan.planner.spread import _count_tables, _drawn

    entry = counter_entry(random_counter(seed))
    draw = np.random.default_rng(seed).integers(0, 6, size=6)
    assert _drawn(entry, _count_tables(entry), np.bincount(draw, minlength=6)) == pooled_entry(entry, draw.tolist())


def copying_profile(copies: list[bool]) -> Profile:
    """A llama.cpp target (T(n) = 20 + n - 1 ms, floor 20 ms) and a lookup whose prompts either copy
    (every round accepts all 4 tokens) or do not (every round accepts none)."""
    counter = AcceptanceCounter(GAMMA, width=3)
    for copies_here in copies:
        for _ in range(10):
            counter.add_chain(GAMMA if copies_here else 0)
        counter.end_prompt()
    target = ModelEntry("target", "default", "fp", role="target", latency=(linear_curve(20.0, 1.0),),
                        engine_plain_ms=20.0)
    device = DeviceInfo("cpu", "test cpu", "cpu", source="llama.cpp", numerics="fast")
    return Profile(device, (target,), (counter_entry(counter),), (RetrievalEntry("ngram-3", "ngram:3", 0.05),))


def test_identical_prompts_leave_no_spread():
    counter = AcceptanceCounter(GAMMA, width=3)
    for _ in range(5):
        for accepted in (0, 2, 4):
            counter.add_chain(accepted)
        counter.end_prompt()
    plan = solve_plan(replace(copying_profile([True]), acceptance=(counter_entry(counter),)), OPTIONS).plan
    spread = plan.solver["prompt_spread"]
    assert plan.stages and spread["prompts"] == 5 and spread["level"] == 0.9
    point = 20.0 / plan.predicted.ms_per_token
    assert spread["speedup"] == pytest.approx([point, point], abs=1e-3)


def test_prompts_that_copy_or_not_spread_the_prediction_around_its_point():
    plan = solve_plan(copying_profile([True, False, False, False, True, False, False, False]), OPTIONS).plan
    point = 20.0 / plan.predicted.ms_per_token
    low, high = plan.solver["prompt_spread"]["speedup"]
    assert low < point - 0.1 and high > point + 0.1
    assert "over draws of its 8 calibration prompts" in floor_phrase(plan)


def test_a_profile_without_per_prompt_counts_plans_as_before():
    profile = copying_profile([True, False] * 3)
    bare = replace(profile, acceptance=(replace(profile.acceptance[0], per_prompt=()),))
    with_counts, without = solve_plan(profile, OPTIONS).plan, solve_plan(bare, OPTIONS).plan
    assert "prompt_spread" not in without.solver and "prompt_spread" in with_counts.solver
    assert with_counts.stages == without.stages and with_counts.predicted == without.predicted
    assert "calibration prompts" not in floor_phrase(without)


def test_per_prompt_counts_survive_the_profile_file(tmp_path):
    profile = replace(copying_profile([True]), acceptance=(counter_entry(random_counter(7)),))
    save_profile(profile, tmp_path / "profile.yaml")
    loaded = load_profile(tmp_path / "profile.yaml").acceptance[0]
    assert loaded.per_prompt == profile.acceptance[0].per_prompt and len(loaded.per_prompt) == 6
    document = profile_to_dict(profile)
    document["acceptance"][0]["per_prompt"][0]["hist"] = [1] * (GAMMA + 2)  # a round longer than gamma
    with pytest.raises(ProfileError, match="per_prompt"):
        profile_from_dict(document)


def test_plan_prints_the_spread_and_a_line_when_its_low_end_is_below_the_floor(tmp_path, capsys):
    from specplan.cli.main import main

    save_profile(copying_profile([True] + [False] * 7), tmp_path / "profile.yaml")
    assert main(["plan", str(tmp_path / "profile.yaml"), "-o", str(tmp_path / "plan.yaml")]) == 0
    printed = capsys.readouterr().out
    assert "over draws of its 8 calibration prompts" in printed
    low = float(printed.split("over draws")[0].rsplit("; ", 1)[1].split("x-")[0])
    assert (low < 1.0) == ("least favourable draws" in printed)


@pytest.mark.parametrize("copies, shared", [([True] + [False] * 7, False), ([True, False] * 4, True)])
def test_a_shared_load_speculates_only_where_the_low_end_of_the_spread_pays(copies, shared):
    """At 2 sequences decoded together (llama.cpp: T(n, 2) = T(2n)) the solver's best configuration speculates on
    both profiles, but where one prompt in eight copies, a draw of the prompts that copies nothing loses to
    plain decoding: the schedule plays plain decoding there, as every request's draft would cost the other
    one too. Where half the prompts copy, the low end still pays by the margin and the row keeps the speculation."""
    from specplan.planner.batch import batch_view
    from specplan.planner.schedule import SHARED_MARGIN, playable_schedule, solve_schedule
    from specplan.planner.spread import prompt_spread

    profile = copying_profile(copies)
    plan = solve_plan(profile, OPTIONS).plan
    view = batch_view(profile, 2)
    best = solve_plan(view, OPTIONS).candidates[0]
    plain_ms = next(row.ms_per_token for row in solve_plan(view, OPTIONS).candidates if not row.stages)
    assert plan.stages and best.stages and best.ms_per_token < plain_ms
    low = prompt_spread(replace(plan, stages=best.stages), view, plain_ms).low
    assert (low >= SHARED_MARGIN) == shared
    for schedule in (solve_schedule(profile, OPTIONS, (1, 2), plan).schedule, playable_schedule(plan, profile, (1, 2), OPTIONS)):
        first, second = schedule.rows
        assert first.stages and bool(second.stages) == shared
        if not shared:
            assert second.tokens_per_s == pytest.approx(second.plain_tokens_per_s) and second.speedup == 1.0
            assert f"at the low end, under the {SHARED_MARGIN:.2f}x a shared load asks" in second.summary
