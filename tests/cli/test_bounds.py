"""Bad values never reach a traceback: bounded inputs, every value read from a file checked,
undecodable input exit 2, messages that name the real mistake. Each case: one stderr line and exit code 2, fast."""

from __future__ import annotations

import copy
import time
from pathlib import Path

import pytest
import yaml

from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.errors import DrafterSpecError, PlanError, PromptError
from specplan.core.prompts import read_prompts
from specplan.core.yamlio import read_document
from tests.cli.test_cli_errors import assert_one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[2]


def edit(path: Path, change) -> None:
    """Apply ``change`` to the parsed YAML at ``path`` and write it back."""
    document = yaml.safe_load(path.read_text())
    change(document)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


@pytest.mark.parametrize("flags, fragment", [
    (["--max-budget", "1000000000"], "--max-budget: 1000000000 is out of range"),
    (["--max-depth", "1000000000"], "--max-depth: 1000000000 is out of range"),
    (["--max-budget", "1000000000", "--sku", "h100-sxm"], "out of range"),
    (["--temperature", "nan"], "--temperature: nan is out of range"),
    (["--horizon", "100000"], "--horizon: 100000 is out of range"),
])
def test_plan_search_is_bounded(stored, capsys, flags, fragment):
    start = time.perf_counter()
    code, err = run_cli(["plan", "profile.yaml", "-o", "out.yaml", *flags], capsys)
    assert_one_line_error(code, err, fragment)
    assert time.perf_counter() - start < 5 and not (stored / "out.yaml").exists()


@pytest.mark.parametrize("gammas, fragment", [("64", "between 1 and 63"), ("0,4", "between 1 and 63"), ("a-b", "a range like")])
def test_bench_grid_lengths_are_bounded(stored, capsys, gammas, fragment):
    code, err = run_cli(["bench", "plan.yaml", "--baselines", "grid", "--grid-gammas", gammas], capsys)
    assert_one_line_error(code, err, fragment)


def test_export_search_is_bounded(stored, capsys):
    code, err = run_cli(["export", "plan.yaml", "--engine", "vllm", "--max-budget", "100000"], capsys)
    assert_one_line_error(code, err, "out of range")


@pytest.mark.parametrize("change, fragment", [
    (lambda d: d["stages"][0]["shape"].update(kind="tree", budget=10**9, depth=4, dynamic=True), "budget = 1000000000"),
    (lambda d: d["stages"][0]["shape"].update(kind="sequence", gamma=10**9), "gamma = 1000000000"),
    (lambda d: d["stages"][0]["shape"].update(kind="sequence", gamma=2.7), "must be an integer, got 2.7"),
    (lambda d: d["stages"][0]["shape"].update(kind="tree", parents=[-1] + [0] * 5000), "more than 256"),
    (lambda d: d["predicted"].update(speedup=float("inf")), "predicted.speedup"),
    (lambda d: d.update(temperature=float("nan")), "temperature"),
    (lambda d: d.update(target="renamed"), "plan's `target` is 'renamed'"),
])
def test_plan_values_are_checked(stored, capsys, change, fragment):
    edit(stored / "plan.yaml", change)
    code, err = run_cli(["run", "plan.yaml"], capsys)
    assert_one_line_error(code, err, fragment)
    assert "plan.yaml" in err


@pytest.mark.parametrize("change, fragment", [
    (lambda d: d["models"][0]["latency"][0]["ms"].__setitem__(0, float("inf")), "ms = inf"),
    (lambda d: d["models"].append(copy.deepcopy(d["models"][0])), "appears twice"),
    (lambda d: d["retrieval"][0].update(ms_per_call=float("nan")), "ms_per_call"),
    (lambda d: d["acceptance"][0].update(gamma=3.5), "gamma must be an integer"),
    (lambda d: d["device"].pop("sku"), "device lacks sku"),
])
def test_profile_values_are_checked(stored, capsys, change, fragment):
    edit(stored / "profile.yaml", change)
    code, err = run_cli(["plan", "profile.yaml", "-o", "out.yaml"], capsys)
    assert_one_line_error(code, err, fragment)
    assert "profile.yaml" in err and not (stored / "out.yaml").exists()


def test_alias_bomb_is_refused_quickly(stored, capsys):
    lines = ["schema_version: 1", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
              for i in range(1, 10)]
    (stored / "bomb.yaml").write_text("\n".join(lines + ["models: *a9", "acceptance: []"]) + "\n")
    start = time.perf_counter()
    code, err = run_cli(["plan", "bomb.yaml", "-o", "out.yaml"], capsys)
    assert_one_line_error(code, err, "alias")
    assert time.perf_counter() - start < 2


def test_huge_document_is_refused(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text("schema_version: 1\n" + "#" * (5 * 1024 * 1024))
    with pytest.raises(PlanError, match="more than a plan file can be"):
        read_document(path, "plan", PlanError)


def test_documents_without_aliases_load_as_safe_load(stored):
    text = (stored / "profile.yaml").read_text()
    assert read_document(stored / "profile.yaml", "profile", PlanError) == yaml.safe_load(text)


@pytest.mark.parametrize("encode", [
    lambda text: text.encode("utf-16"),
    lambda text: bytes(range(256)) * 4,
])
def test_undecodable_profile_is_exit_2(stored, capsys, encode):
    (stored / "profile.yaml").write_bytes(encode((stored / "profile.yaml").read_text()))
    code, err = run_cli(["plan", "profile.yaml", "-o", "out.yaml"], capsys)
    assert_one_line_error(code, err, "profile.yaml")
    code, err = run_cli(["export", "plan.yaml", "--engine", "vllm"], capsys)  # reached through profile.path
    assert_one_line_error(code, err, "profile.yaml")


def test_invalid_utf8_prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(PromptError, match="not UTF-8"):
        read_prompts(path)


def test_malformed_head_json(tmp_path):
    from specplan.runtime.drafters.head_model import HEAD_CONFIG, HEAD_WEIGHTS, load_head

    (tmp_path / HEAD_WEIGHTS).write_bytes(b"")
    for text in ("{not json", "[1, 2]", '{"format": 1}'):
        (tmp_path / HEAD_CONFIG).write_text(text)
        with pytest.raises(DrafterSpecError):
            load_head(tmp_path, None, None, "cpu")


@pytest.mark.parametrize("field, value, fragment", [
    ("bandwidth_gbs", 0, "bandwidth_gbs = 0 must be a finite number > 0"),
    ("bandwidth_gbs", -100, "bandwidth_gbs = -100"),
    ("vector_tflops", float("nan"), "vector_tflops"),
])
def test_sku_figures_are_checked(stored, capsys, field, value, fragment):
    table = yaml.safe_load((ROOT / "planner" / "data" / "skus.yaml").read_text())
    table["skus"]["h100-sxm"][field] = value
    (stored / "skus.yaml").write_text(yaml.safe_dump(table))
    code, err = run_cli(["plan", "profile.yaml", "--sku", "h100-sxm", "--skus", "skus.yaml", "-o", "h/plan.yaml"], capsys)
    assert_one_line_error(code, err, fragment)


def test_a_profile_given_as_sku_table(stored, capsys):
    code, err = run_cli(["roofline", "profile.yaml", "--skus", "profile.yaml"], capsys)
    assert_one_line_error(code, err, "no `skus:` table")


def test_a_plan_given_as_profile(stored, capsys):
    code, err = run_cli(["plan", "plan.yaml", "-o", "out.yaml"], capsys)
    assert_one_line_error(code, err, "is a plan, not a profile")
    code, err = run_cli(["plan", "plan.yaml"], capsys)  # its default output is the plan itself
    assert_one_line_error(code, err, "is a plan, not a profile")
    code, err = run_cli(["run", "profile.yaml"], capsys)
    assert_one_line_error(code, err, "is a profile, not a plan")


def test_save_calibration_needs_fit(stored, capsys):
    code, err = run_cli(["roofline", "profile.yaml", "--save-calibration", "fit.json"], capsys)
    assert_one_line_error(code, err, "add --fit")


@pytest.mark.parametrize("spec, fragment", [("layerskip:0,0", "twice"), ("layerskip:0", "at least 1")])
def test_layer_lists_are_checked(spec, fragment):
    with pytest.raises(DrafterSpecError, match=fragment):
        parse_drafter_spec(spec)


def test_duplicate_drafters_are_refused(capsys, tmp_path):
    code, err = run_cli(["profile", "--drafter", "ngram:3", "--drafter", "ngram:3", "-o", str(tmp_path / "p.yaml")], capsys)
    assert_one_line_error(code, err, "twice")


def test_run_temperature_nan_before_loading(stored, capsys, monkeypatch):
    import specplan.api as api

    monkeypatch.setattr(api.Runner, "open", classmethod(lambda cls, *a, **k: pytest.fail("model loaded")))
    code, err = run_cli(["run", "plan.yaml", "--temperature", "nan"], capsys)
    assert_one_line_error(code, err, "--temperature: nan is out of range")


def test_context_check():
    from specplan.core.plan import Stage, StageShape
    from specplan.runtime.context import check_fits, draft_width
    from tests.core.test_formats import make_plan

    plan = make_plan([Stage("ngram-3", "target", StageShape("tree", budget=16, depth=4, dynamic=True))])
    assert draft_width(plan) == 16 and draft_width(make_plan()) == 0
    from dataclasses import replace

    from specplan.core.schedule import Schedule, ScheduleRow
    wider = (Stage("ngram-5", "target", StageShape("sequence", gamma=23)),)  # a row a round may play instead
    rows = (ScheduleRow(1, "plan", plan.stages, 1.0, 1.0, 1.0, 1.0, 1.0), ScheduleRow(2, "row", wider, 1.0, 1.0, 1.0, 1.0, 1.0))
    assert draft_width(replace(plan, schedule=Schedule(rows, None))) == 24
    check_fits(100, 100, 16, 216)
    with pytest.raises(PromptError, match="1 over the model's context of 215"):
        check_fits(100, 100, 16, 215)
    check_fits(10**6, 10**6, 0, None)


@pytest.mark.slow
@pytest.mark.parametrize("flags, fragment", [
    (["--prompt", "word " * 20000], "over the model's context of 8192"),
    (["--prompt", "hi", "--max-new-tokens", "100000"], "over the model's context"),
])
def test_run_refuses_more_than_the_context(stored, capsys, default_model_dir, flags, fragment):
    code, err = run_cli(["run", "plan.yaml", *flags], capsys)
    assert_one_line_error(code, err, fragment)


def test_shared_values_are_written_out_not_aliased(tmp_path):
    from specplan.core.yamlio import write_document

    shared = [1, 2, 3]
    write_document(tmp_path / "x.yaml", {"schema_version": 1, "a": shared, "b": shared})
    assert "&" not in (tmp_path / "x.yaml").read_text()
    assert read_document(tmp_path / "x.yaml", "x", PlanError)["b"] == shared


def test_a_hand_edited_shape_is_refused_unless_forced(stored, capsys, monkeypatch):
    import specplan
    from specplan.runtime.runner import PlanRunner

    edit(stored / "plan.yaml", lambda d: d["stages"][0]["shape"].update(parents=[-1, 0, 0, 1, 1]))
    code, err = run_cli(["run", "plan.yaml"], capsys)
    assert_one_line_error(code, err, "was it edited?")
    code, err = run_cli(["bench", "plan.yaml", "--no-plots"], capsys)
    assert_one_line_error(code, err, "was it edited?")
    monkeypatch.setattr(PlanRunner, "open", classmethod(lambda cls, *args, **kwargs: "opened"))
    assert specplan.Runner.open(stored / "plan.yaml", force=True).plan_runner == "opened"


def test_stored_plans_pass_the_recheck():
    from specplan.core.contract import load_plan_and_profile
    from specplan.planner.recheck import check_prediction

    for path in sorted((ROOT / "profiles").glob("*/plan*.yaml")):
        plan, profile, _ = load_plan_and_profile(str(path))
        check_prediction(plan, profile)


def numeric_options():
    """(verb, option, its argparse action) for every option of every verb whose value is a number."""
    import argparse

    from specplan.cli.main import build_parser

    verbs = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for verb, parser in verbs.choices.items():
        for action in parser._actions:
            if action.type in (int, float) or hasattr(action.type, "low"):
                yield verb, action.option_strings[-1], action


NUMERIC = sorted(((verb, option) for verb, option, _ in numeric_options()))


def test_every_numeric_option_is_bounded():
    """A bare int or float option would let 10**30, -1 or nan through to torch, numpy or llama.cpp."""
    bare = [f"{verb} {option}" for verb, option, action in numeric_options() if action.type in (int, float)]
    assert not bare and len(NUMERIC) >= 30


@pytest.mark.parametrize("verb, option", NUMERIC)
def test_numeric_options_refuse_their_extremes_in_one_line(verb, option, capsys):
    """Every number option at its type's extremes and just past its bounds: exit 2 and one line
    naming the option, before any file is read or model loaded; its bounds themselves pass."""
    from specplan.cli.main import build_parser

    action = next(action for v, o, action in numeric_options() if (v, o) == (verb, option))
    low, high = action.type.low, action.type.high
    for value in (str(low - 1), str(high + 1), "nan", "inf", "-inf", "1e400", "9" * 40, "-" + "9" * 40, "x", ""):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args([verb, option, value])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and option in err, (value, err)
    assert action.type(str(high)) == high
    if not action.type.above_low:  # (low, high]: low itself is refused above
        assert action.type(str(low)) == low
