"""``specplan bench`` on a tiny random model (2 prompts): the report's structure, the grid's
tree and hierarchy points, plan quality for a tree plan, and that the lossless check, the
plan-quality verdict and the plots' dependency check can fail."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

from specplan.cli.main import main
from specplan.core.plan import load_plan
from specplan.core.profile import AcceptanceEntry, LatencyCurve, ModelEntry, Profile, RetrievalEntry, load_profile, save_profile
from specplan.core.plan import Stage, StageShape
from specplan.bench.grid import CostTerms, grid_points, point_name, unique_names
from specplan.bench.metrics import lossless_verdict
from specplan.runtime.lossless import LosslessCheck, check_lossless, first_divergence
from specplan.bench.quality import plan_quality, term_effects

WIDTHS = (1, 2, 4, 8, 16, 32, 64)
METHODS = {"plan", "plain", "plain-runtime", "hf-assisted", "hf-lookup"}


def tiny_profile(model_dir: str) -> Profile:
    """A made-up profile of the tiny model (no measuring) in which the best plan is a hierarchy
    ngram-3 -> layerskip-2 -> target, the best one-stage plan a layerskip-2 tree."""
    from specplan.models.load import fingerprint
    from specplan.runtime.device import describe_device

    def curve(base: float) -> tuple[LatencyCurve, ...]:
        return (LatencyCurve(256, WIDTHS, tuple(base * (1 + 0.02 * n) for n in WIDTHS)),)

    return Profile(
        device=describe_device(torch.device("cpu")),
        models=(ModelEntry("target", model_dir, fingerprint(model_dir), dtype="float32", role="target", latency=curve(2.0)),
                ModelEntry("layerskip-2", "layerskip:2", "", dtype="float32", role="drafter", latency=curve(0.5), base="target")),
        acceptance=(AcceptanceEntry("layerskip-2", "target", 0.0, 0.8, 8, (2, 2, 2, 2, 2, 2, 2, 2, 20), (0.7, 0.1, 0.05),
                                    samples=36),
                    AcceptanceEntry("ngram-3", "target", 0.0, 0.2, 8, (30, 4, 1, 1, 0, 0, 0, 0, 0), (0.2, 0.1), samples=36),
                    AcceptanceEntry("ngram-3", "layerskip-2", 0.0, 0.5, 8, (10, 8, 6, 4, 2, 2, 1, 1, 2), (0.5, 0.2),
                                    samples=36)),
        retrieval=(RetrievalEntry("ngram-3", "ngram:3", 0.05),),
    )


@pytest.fixture(scope="module")
def bench_inputs(tmp_path_factory, tiny_model_dir):
    folder = tmp_path_factory.mktemp("bench")
    save_profile(tiny_profile(tiny_model_dir), folder / "profile.yaml")
    assert main(["plan", str(folder / "profile.yaml"), "-o", str(folder / "plan.yaml")]) == 0
    assert main(["plan", str(folder / "profile.yaml"), "--stages", "1", "-o", str(folder / "tree-plan.yaml")]) == 0
    prompts = folder / "prompts.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "writing", "turns": ["Write a short poem about caches."]})
                       + "\n" + json.dumps({"question_id": 2, "category": "math", "turns": ["What is 12 times 13?"]}) + "\n")
    return folder


def run_cli(folder, report, *extra) -> int:
    return main(["bench", str(folder / "plan.yaml"), "--prompts", str(folder / "prompts.jsonl"), "--limit", "2",
                 "--max-new-tokens", "6", "--report", str(report), *extra])


def test_report_structure(bench_inputs, tmp_path, capsys):
    plan = load_plan(bench_inputs / "plan.yaml")
    assert [stage.drafter for stage in plan.stages] == ["ngram-3", "layerskip-2"]  # layerskip-2: hf-assisted's assistant
    code = run_cli(bench_inputs, tmp_path, "--baselines", "plain,plain-runtime,hf-assisted,hf-lookup,grid",
                   "--grid-gammas", "2,3", "--grid-limit", "1", "--grid-min-speedup", "0", "--no-plots")
    out = capsys.readouterr().out
    assert code == 0
    assert (tmp_path / "report.md").is_file() and (tmp_path / "report.json").is_file()
    report = json.loads((tmp_path / "report.json").read_text())
    for key in ("schema_version", "meta", "methods", "reference", "overall", "categories", "headline", "lossless",
                "plan_quality", "grid", "rows", "notes", "plots"):
        assert key in report, key
    assert {m["name"] for m in report["methods"]} == METHODS
    assert report["reference"] == "plain"
    assert len(report["rows"]) == 2 * len(METHODS)
    for row in report["rows"]:
        assert row["new_tokens"] == len(row["token_ids"]) <= 6
        assert row["tokens_per_s"] > 0 and row["target_forwards"] >= 1 and 0 <= row["overhead_share"] <= 1
    assert set(report["categories"]) == {"writing", "math"}
    assert set(report["headline"]) == {"writing", "math", "all"}
    assert report["headline"]["all"]["best_peer"] in ("hf-assisted", "hf-lookup")
    assert all(entry["ok"] for entry in report["lossless"].values()), report["lossless"]  # float32: token-identical
    points = {point["name"]: point for point in report["grid"]["points"]}
    assert {"plain-runtime", "layerskip-2/g2", "layerskip-2/g3", "ngram-3/g2", "ngram-3/g3"} <= set(points)
    assert points[point_name(plan.stages)]["roles"] == ["plan"]  # the hierarchy itself, measured
    kinds = {point["kind"] for point in points.values() if point["measured_tokens_per_s"]}
    assert kinds == {"plain", "sequence", "tree", "hierarchy"}
    trees = [point for point in points.values() if point["kind"] == "tree"]
    assert {point["stages"][0]["drafter"] for point in trees} == {"layerskip-2", "ngram-3"}
    assert all(point["measured_terms"]["accepted"] >= 1 and point["lossless"] for point in trees)
    quality = report["plan_quality"]
    assert {"predicted_over_measured", "plan_over_best", "terms", "verdict"} <= set(quality)
    assert report["plots"] == []
    assert "## Headline" in out and "## Grid" in out and "## Plan quality" in out


def test_plots(bench_inputs, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert run_cli(bench_inputs, tmp_path, "--baselines", "plain,hf-lookup") == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["plots"] == ["latency.png", "acceptance.png", "speedup_by_category.png",
                               "predicted_vs_measured.png", "plan.png"]
    for name in report["plots"]:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({name})" in (tmp_path / "report.md").read_text()
    assert "hf-assisted" not in {m["name"] for m in report["methods"]}
    capsys.readouterr()


class WrongOutput:
    """The plan with its last token changed: what a lossy runtime would produce."""

    def __init__(self, inner):
        self.inner, self.name, self.kind, self.description = inner, "wrong", "peer", "the plan, last token changed"

    def run(self, prompt_ids, max_new_tokens):
        result = self.inner.run(prompt_ids, max_new_tokens)
        tokens = result.token_ids[:-1] + ((result.token_ids[-1] + 1) % 49152,)
        return dataclasses.replace(result, token_ids=tokens)


def test_lossless_check_fails_on_a_wrong_output(bench_inputs):
    from specplan.core.contract import load_plan_and_profile
    from specplan.core.prompts import read_prompts
    from specplan.bench.run import BenchSettings, build_methods, run_bench
    from specplan.bench.grid import predicted_costs
    from specplan.runtime.drafters.base import SamplingConfig
    from specplan.runtime.runner import PlanRunner

    plan, profile, path = load_plan_and_profile(str(bench_inputs / "plan.yaml"))
    runner = PlanRunner.open(plan, profile, path)
    settings = BenchSettings(max_new_tokens=6, baselines=("plain",))
    costs, _ = predicted_costs(profile, 0.0, (1, 2))
    methods = build_methods(runner, settings, SamplingConfig(), costs, [])
    methods.append(WrongOutput(methods[0]))
    report = run_bench(runner, read_prompts(bench_inputs / "prompts.jsonl"), settings, methods=methods)
    lossless = report.lossless()
    assert lossless["plan"]["ok"] is True
    assert lossless["wrong"]["ok"] is False and len(lossless["wrong"]["divergences"]) == 2
    assert all(d["gap"] is not None for d in lossless["wrong"]["divergences"])
    assert report.aggregates()["wrong"]["lossless"] is False
    assert "- wrong: **FAIL**" in report.markdown()


def test_check_lossless_and_near_ties():
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert check_lossless([1, 2, 3], [1, 2, 4], lambda i: 0.1) == LosslessCheck(False, 2, 0.1)
    assert check_lossless([1, 2, 3], [1, 2]).index == 2  # a truncated output is not lossless either
    tie, clear = LosslessCheck(False, 2, 0.1), LosslessCheck(False, 2, 3.0)
    assert lossless_verdict([LosslessCheck(True)] * 2, "float32")[0] is True
    assert lossless_verdict([LosslessCheck(True), tie], "float32")[0] is False  # float32: any divergence fails
    assert lossless_verdict([LosslessCheck(True), tie], "bfloat16")[0] is True
    assert lossless_verdict([tie, clear], "bfloat16")[0] is False


def test_quality_verdict_names_the_term_that_was_off():
    predicted = CostTerms(draft_ms=4.0, verify_ms=20.0, accepted=2.0, ms_per_token=12.0)
    measured = {"draft_ms": 4.0, "verify_ms": 40.0, "accepted": 2.0, "other_ms": 1.0, "verify_ms_profiled_at_widths": 20.0,
                "decode_tokens_per_s": 1000 / 22.5, "tokens_per_s": 40.0}
    effects = term_effects(predicted, measured)
    assert effects[1]["term"].startswith("verify") and effects[1]["effect"] == pytest.approx(20 / 24, abs=1e-3)
    quality = plan_quality("p", predicted, measured, {}, None)
    assert quality["prediction_ok"] is False
    assert "verify time per round" in quality["verdict"][0]
    grid = {"a": {"predicted": predicted, "measured": measured},
            "b": {"predicted": CostTerms(0, 20, 1, 20), "measured": dict(measured, tokens_per_s=80.0)}}
    quality = plan_quality("p", predicted, measured, grid, "a")
    assert quality["choice_ok"] is False and quality["best_grid_point"] == "b" and quality["plan_over_best"] == 0.5


def test_grid_points_put_the_plan_first(bench_inputs):
    plan = load_plan(bench_inputs / "plan.yaml")
    points, notes = grid_points(plan, load_profile(bench_inputs / "profile.yaml"), (2, 4), budgets=(4, 8))
    assert "plan" in points[0].roles and "plain" in points[1].roles
    assert points[0].stages == plan.stages and points[0].name == point_name(plan.stages)
    assert len({p.name for p in points}) == len(points) == len({p.stages for p in points})
    grid = [p for p in points if "grid" in p.roles]
    assert {(p.drafter, p.gamma) for p in grid if p.stages[0].shape.kind == "sequence"} == {
        ("layerskip-2", 2), ("layerskip-2", 4), ("ngram-3", 2), ("ngram-3", 4)}
    trees = [p for p in grid if p.stages[0].shape.kind == "tree"]
    assert {p.drafter for p in trees} == {"layerskip-2", "ngram-3"}
    assert all(len(p.stages[0].shape.parents) <= 8 and p.name == point_name(p.stages) for p in trees)
    alternatives = {a.summary for a in plan.alternatives}
    assert len([p for p in points if "alternative" in p.roles]) == len(alternatives)  # every one matched
    assert all(p.predicted.complete and p.predicted.ms_per_token > 0 for p in points)
    assert not any("tree" in note for note in notes)


def test_point_names_are_readable_and_unique():
    def stage(drafter, verifier, **shape):
        return Stage(drafter, verifier, StageShape(**shape))

    tree = stage("recycle", "layerskip-26", kind="tree", budget=16, depth=3, parents=(-1,) + tuple(range(15)))
    hierarchy = (tree, stage("layerskip-26", "target", kind="sequence", gamma=2))
    assert point_name(()) == "plain-runtime"
    assert point_name(hierarchy) == "recycle/tree16>layerskip-26/g2"
    assert point_name((stage("ngram-3", "target", kind="sequence", gamma=4),)) == "ngram-3/g4"
    dynamic = stage("layerskip-2", "target", kind="tree", budget=8, depth=3, dynamic=True,
                    graft="cache", graft_budget=2)
    assert point_name((dynamic,)) == "layerskip-2/dtree8+cache2"
    wide = stage("recycle", "target", kind="tree", budget=4, depth=1, parents=(-1, 0, 0, 0))
    deep = stage("recycle", "target", kind="tree", budget=4, depth=2, parents=(-1, 0, 0, 1))
    names = unique_names([(wide,), (deep,)])
    assert names == {(wide,): "recycle/tree4d1", (deep,): "recycle/tree4d2"}


def test_plan_quality_for_a_tree_plan(bench_inputs):
    from specplan.core.contract import load_plan_and_profile
    from specplan.core.prompts import read_prompts
    from specplan.bench.run import BenchSettings, run_bench
    from specplan.runtime.runner import PlanRunner

    plan, profile, path = load_plan_and_profile(str(bench_inputs / "tree-plan.yaml"))
    assert len(plan.stages) == 1 and plan.stages[0].shape.kind == "tree"
    settings = BenchSettings(max_new_tokens=6, baselines=("plain", "grid"), grid_gammas=(2,), grid_budgets=(4,),
                             grid_limit=1, grid_min_speedup=0.0)
    report = run_bench(PlanRunner.open(plan, profile, path), read_prompts(bench_inputs / "prompts.jsonl"), settings)
    quality = report.quality
    assert quality["predicted_tokens_per_s"] == pytest.approx(plan.predicted.tokens_per_s, rel=1e-3)
    assert quality["measured_decode_tokens_per_s"] > 0 and quality["predicted_over_measured"] > 0
    terms = {term["term"]: term for term in quality["terms"]}
    assert terms["accepted per target forward"]["predicted"] == pytest.approx(plan.predicted.accepted_per_target_forward,
                                                                             abs=1e-3)
    assert terms["verify time per round (ms)"]["measured"] > 0
    plan_point = report.grid[point_name(plan.stages)]
    assert plan_point["point"].roles[0] == "plan" and plan_point["measured"]["rounds"] >= 1
    assert quality["plan_over_best"] > 0 and quality["best_grid_point"] in report.grid
    assert any(line.startswith("choice") for line in quality["verdict"])
    assert report.lossless()["plan"]["ok"] is True


def test_quality_without_the_planners_terms_still_has_the_prediction():
    predicted = CostTerms(float("nan"), float("nan"), accepted=2.0, ms_per_token=10.0)
    measured = {"draft_ms": 4.0, "verify_ms": 40.0, "accepted": 2.0, "other_ms": 1.0, "decode_tokens_per_s": 50.0,
                "tokens_per_s": 40.0}
    quality = plan_quality("p", predicted, measured, {}, None)
    assert quality["predicted_over_measured"] == 2.0 and quality["terms"] == []
    assert "unknown" in quality["verdict"][0]


def test_missing_matplotlib_is_one_line_exit_2(bench_inputs, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert run_cli(bench_inputs, tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install specplan[bench]" in err
    assert not (tmp_path / "report.json").exists()


def test_unknown_baseline_is_bad_input(bench_inputs, tmp_path, capsys):
    assert run_cli(bench_inputs, tmp_path, "--baselines", "plain,vllm") == 2
    assert "choose from" in capsys.readouterr().err


class _TimedSession:
    """A session stand-in: each forward adds its width to ``forward_seconds``."""

    def __init__(self, advance_through_extend: bool):
        self.forward_seconds = 0.0
        self.advance_through_extend = advance_through_extend

    def extend(self, tokens, tree=None):
        self.forward_seconds += len(tokens)
        return None

    def advance(self, tokens):
        if self.advance_through_extend:  # the contract's default (torch)
            return self.extend(tokens)
        self.forward_seconds += len(tokens)  # llama.cpp: its own decode without logits rows
        return None

    def extend_best_tokens(self, tokens):
        if self.advance_through_extend:  # the contract's default (torch)
            return self.extend(tokens)
        self.forward_seconds += len(tokens)  # llama.cpp: the argmax read in its own buffer
        return None


@pytest.mark.parametrize("advance_through_extend", [True, False])
def test_recording_notes_a_prefill_by_advance_once(advance_through_extend):
    """The bench's forward log sees a prompt prefilled by ``advance`` (its first call, the prefill
    it reports) and a greedy verify by ``extend_best_tokens``, whether or not the session's
    versions go through extend, and counts each once."""
    from specplan.bench.methods import recording

    session = _TimedSession(advance_through_extend)
    with recording(session) as log:
        session.advance([1, 2, 3, 4, 5])
        session.extend([6])
        session.extend([7, 8])
        session.extend_best_tokens([9, 10, 11])
    assert log.calls == [(5, 5.0), (1, 1.0), (2, 2.0), (3, 3.0)]
    assert not {"extend", "extend_best_tokens", "advance"} & set(vars(session))  # the methods are restored


def test_the_bench_judges_a_horizon_plan_by_its_own_costs():
    """A plan solved with --horizon is held against the same cost model in the bench's grid, and a
    horizon read from a plan file is checked."""
    from dataclasses import replace

    from specplan.bench.grid import plan_terms, planner_costs
    from specplan.planner.horizon import plan_horizon
    from specplan.core.errors import PlanError
    from specplan.planner import solve_plan
    from specplan.planner.options import runtime_options

    profile = load_profile(Path(__file__).resolve().parents[2] / "profiles" / "cpu-qwen-llamacpp-edit-long" / "profile.yaml")
    plan = solve_plan(profile, runtime_options(horizon=128)).plan
    terms = plan_terms(plan, planner_costs(profile, plan.temperature, (4,), (4,), plan_horizon(plan)))
    assert terms.ms_per_token == pytest.approx(plan.predicted.ms_per_token, rel=1e-3)
    for bad in (10**9, "many", 2.5):
        with pytest.raises(PlanError, match="solver.horizon"):
            plan_horizon(replace(plan, solver={**plan.solver, "horizon": bad}))


def test_a_missed_prediction_inside_the_prompt_spread_says_so():
    from specplan.bench.metrics import Measurement
    from specplan.bench.quality import measured_terms, prompt_spread

    # four prompts: two decode twice as fast as the others (copying prompts), 100 tokens each
    rows = [Measurement(tuple(range(100)), seconds, 10, seconds - 0.5, prefill_seconds=0.5, draft_seconds=0.0,
                        verify_forward_seconds=seconds - 0.5, verify_widths=(10,) * 10)
            for seconds in (2.5, 2.5, 4.5, 4.5)]
    measured = measured_terms(rows, lambda n: 10.0)
    assert measured["decode_tokens_per_s"] == pytest.approx(400 / 12)
    assert 25.0 <= measured["decode_tokens_per_s_low"] < 400 / 12 < measured["decode_tokens_per_s_high"] <= 50.0
    assert prompt_spread([100], [2.0]) is None and prompt_spread([100, 100], [2.0, 2.0]) == (50.0, 50.0)
    inside = plan_quality("p", CostTerms(0.0, 100.0, 4.0, 1000 / 38), measured, {}, None)  # predicts 38 tok/s
    assert inside["prediction_ok"] is False and inside["predicted_within_prompt_spread"] is True
    assert "inside the measured rate's 95% interval" in inside["verdict"][0]
    outside = plan_quality("p", CostTerms(0.0, 100.0, 4.0, 1000 / 80), measured, {}, None)
    assert outside["predicted_within_prompt_spread"] is False and "outside" in outside["verdict"][0]


def test_a_category_speedup_has_its_spread_over_prompts():
    from specplan.bench.metrics import Measurement, Row, aggregate

    def row(prompt, method, seconds):
        return Row(prompt, "c", method, Measurement(tuple(range(100)), seconds, 100, seconds), None, 1.0)

    plain = [row(str(p), "plain", 4.0) for p in range(4)]
    plan = [row("0", "plan", 2.0), row("1", "plan", 2.0), row("2", "plan", 4.0), row("3", "plan", 4.0)]
    result = aggregate(plan, plain, "float32")
    assert result["speedup"] == pytest.approx(16 / 12, abs=1e-4)
    low, high = result["speedup_interval"]
    assert 1.0 <= low < 16 / 12 < high <= 2.0  # from all-slow to all-fast resamples
    assert aggregate(plan[:1], plain, "float32")["speedup_interval"] is None  # one prompt has no spread
    assert aggregate(plain, plain, "float32")["speedup_interval"] == [1.0, 1.0]
