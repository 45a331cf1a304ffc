"""Bad input gets one line on stderr, exit code 2, and no traceback."""

from __future__ import annotations

import pytest

from specplan.cli.main import main
from specplan.core.plan import Stage, StageShape, save_plan
from specplan.core.profile import save_profile
from tests.core.test_formats import make_plan, make_profile


def run_cli(argv, capsys):
    """``specplan ARGV``'s exit code and stderr (a usage error exits from argparse, as in a shell)."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.err


def assert_one_line_error(code, err, fragment):
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert fragment in lines[0]


@pytest.fixture
def plan_files(tmp_path):
    save_profile(make_profile(), tmp_path / "profile.yaml")
    save_plan(make_plan([Stage("ngram-3", "target", StageShape("sequence", gamma=3))]), tmp_path / "plan.yaml")
    return tmp_path


def test_unknown_model(capsys, tmp_path):
    code, err = run_cli(["profile", "--target", "no-such-model", "-o", str(tmp_path / "p.yaml")], capsys)
    assert_one_line_error(code, err, "unknown model")


def test_unknown_drafter_spec(capsys):
    code, err = run_cli(["profile", "--drafter", "medusa:4"], capsys)
    assert_one_line_error(code, err, "unknown drafter spec")


@pytest.mark.parametrize("argv, fragment", [
    (["profile", "--context", "8"], "--context: 8 is out of range"),
    (["profile", "--context", "64", "--latency-only"], "--context applies to a full profile"),
])
def test_bad_profile_context(argv, fragment, capsys, tmp_path):
    code, err = run_cli([*argv, "-o", str(tmp_path / "p.yaml")], capsys)
    assert_one_line_error(code, err, fragment)


def test_unknown_option_is_one_line(capsys):
    code = None
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--no-such-flag"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("text, fragment", [("stages: [oops", "not valid YAML"), ("schema_version: 3\n", "schema_version 3")])
def test_malformed_plan(capsys, tmp_path, text, fragment):
    (tmp_path / "plan.yaml").write_text(text)
    code, err = run_cli(["run", str(tmp_path / "plan.yaml")], capsys)
    assert_one_line_error(code, err, fragment)


def test_malformed_profile_for_plan(capsys, tmp_path):
    (tmp_path / "profile.yaml").write_text("schema_version: 1\nmodels: 3\n")
    code, err = run_cli(["plan", str(tmp_path / "profile.yaml")], capsys)
    assert_one_line_error(code, err, "regenerate")


def test_plan_naming_a_model_the_profile_lacks(capsys, plan_files):
    save_plan(make_plan([Stage("model-ghost", "target", StageShape("sequence", gamma=3))]), plan_files / "plan.yaml")
    code, err = run_cli(["run", str(plan_files / "plan.yaml")], capsys)
    assert_one_line_error(code, err, "'model-ghost'")


def test_plan_whose_profile_is_missing(capsys, plan_files):
    (plan_files / "profile.yaml").unlink()
    code, err = run_cli(["run", str(plan_files / "plan.yaml")], capsys)
    assert_one_line_error(code, err, "does not exist")


def test_empty_prompt(capsys, plan_files):
    code, err = run_cli(["run", str(plan_files / "plan.yaml"), "--prompt", "  "], capsys)
    assert_one_line_error(code, err, "prompt is empty")


def test_empty_prompts_file(capsys, plan_files):
    (plan_files / "prompts.jsonl").write_text("")
    code, err = run_cli(["run", str(plan_files / "plan.yaml"), "--prompts", str(plan_files / "prompts.jsonl")], capsys)
    assert_one_line_error(code, err, "no prompts")


def test_bad_numbers(capsys, plan_files):
    code, err = run_cli(["run", str(plan_files / "plan.yaml"), "--max-new-tokens", "0"], capsys)
    assert_one_line_error(code, err, "--max-new-tokens")


def test_compile_of_an_unknown_model_is_one_line(capsys):
    code, err = run_cli(["compile", "no-such-model"], capsys)
    assert_one_line_error(code, err, "unknown model")


def test_jit_is_a_runtime_choice():
    from specplan.cli.main import build_parser

    args = build_parser().parse_args(["run", "plan.yaml", "--runtime", "jit"])
    assert args.runtime == "jit"
