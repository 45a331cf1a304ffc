"""Nothing a user types loses their measurements. Writes are atomic, outputs are
checked before any work, a plan never replaces a profile (or an input) and the reverse."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from specplan.cli.main import main
from specplan.core.errors import OutputError
from specplan.core.files import write_text_atomic
from specplan.core.plan import load_plan, save_plan
from specplan.core.profile import load_profile, save_profile
from tests.cli.test_cli_errors import assert_one_line_error, run_cli
from tests.core.test_formats import make_plan, make_profile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_measuring(monkeypatch):
    """Fail the test if `profile` gets as far as loading a model: outputs must be refused first."""
    import specplan.models.load as load

    def refuse(*args, **kwargs):
        raise AssertionError("profile loaded a model before checking its outputs")

    monkeypatch.setattr(load, "load_model", refuse)


def test_plan_over_its_own_profile_is_refused(stored, capsys):
    before = (stored / "profile.yaml").read_bytes()
    code, err = run_cli(["plan", "profile.yaml", "-o", "profile.yaml"], capsys)
    assert_one_line_error(code, err, "input")
    assert (stored / "profile.yaml").read_bytes() == before


def test_plan_over_another_profile_is_refused(stored, capsys):
    shutil.copy(stored / "profile.yaml", stored / "other.yaml")
    code, err = run_cli(["plan", "profile.yaml", "-o", "other.yaml"], capsys)
    assert_one_line_error(code, err, "holds a profile")
    assert load_profile(stored / "other.yaml")


def test_profile_over_a_plan_is_refused_before_measuring(stored, capsys, no_measuring):
    code, err = run_cli(["profile", "--quick", "-o", "plan.yaml", "--no-plan"], capsys)
    assert_one_line_error(code, err, "holds a plan")


def test_profile_output_named_like_its_plan_is_refused(tmp_path, capsys, no_measuring):
    code, err = run_cli(["profile", "--quick", "-o", str(tmp_path / "plan.yaml")], capsys)
    assert_one_line_error(code, err, "where the plan would go")


def test_plan_flag_naming_the_profile_is_refused(tmp_path, capsys, no_measuring):
    path = str(tmp_path / "p.yaml")
    code, err = run_cli(["profile", "--quick", "-o", path, "--plan", path], capsys)
    assert_one_line_error(code, err, "--plan")


def test_profile_does_not_replace_a_sibling_plan_of_another_profile(stored, capsys, no_measuring):
    code, err = run_cli(["profile", "--quick", "-o", "x.yaml"], capsys)
    assert_one_line_error(code, err, "was not solved from x.yaml")
    assert load_plan(stored / "plan.yaml")


def test_profile_may_replace_the_plan_of_the_same_profile(stored):
    from argparse import Namespace

    from specplan.cli.profile import check_outputs

    args = Namespace(output="profile.yaml", prompts=None, no_plan=False, plan=None)
    assert check_outputs(args) == Path("plan.yaml")
    assert check_outputs(Namespace(output="x.yaml", prompts=None, no_plan=False, plan="x-plan.yaml")) == Path("x-plan.yaml")


@pytest.mark.parametrize("argv", [
    ["profile", "--quick", "-o", "{dir}"],
    ["plan", "profile.yaml", "-o", "{dir}"],
    ["plan", "profile.yaml", "-o", "{file}/plan.yaml"],
    ["roofline", "profile.yaml", "--fit", "--save-calibration", "{dir}"],
    ["bench", "plan.yaml", "--report", "{file}"],
    ["quantize", "default", "--method", "nf4", "-o", "{file}"],
    ["distill", "default", "-o", "{file}"],
])
def test_unusable_output_is_refused_before_work(stored, capsys, no_measuring, argv):
    (stored / "folder").mkdir()
    (stored / "a-file").write_text("x")
    argv = [part.format(dir="folder", file="a-file") for part in argv]
    code, err = run_cli(argv, capsys)
    assert_one_line_error(code, err, "")
    assert "a-file" in err or "folder" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_folder_is_refused(stored, capsys):
    locked = stored / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        code, err = run_cli(["plan", "profile.yaml", "-o", "locked/plan.yaml"], capsys)
    finally:
        locked.chmod(0o700)
    assert_one_line_error(code, err, "permission denied")


def test_missing_folders_are_created_by_every_writer(stored, capsys):
    assert main(["plan", "profile.yaml", "-o", "new/deeper/plan.yaml"]) == 0
    assert load_plan(stored / "new" / "deeper" / "plan.yaml")
    assert main(["plan", "profile.yaml", "--sku", "h100-sxm", "-o", "sku/deep/plan.yaml"]) == 0
    assert main(["roofline", "profile.yaml", "--fit", "--save-calibration", "cal/fit.json"]) == 0
    assert (stored / "cal" / "fit.json").is_file()


def test_interrupted_write_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "profile.yaml"
    save_profile(make_profile(), path)
    before = path.read_bytes()

    def full_disk(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OutputError, match="No space left on device"):
        save_plan(make_plan(), path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.yaml"]


def test_full_disk_is_one_line_exit_2(stored, capsys, monkeypatch):
    def full_disk(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    code, err = run_cli(["plan", "profile.yaml", "-o", "full/plan.yaml"], capsys)
    assert_one_line_error(code, err, "No space left")
    assert not (stored / "full" / "plan.yaml").exists()


def test_atomic_write_replaces_and_keeps_permissions(tmp_path):
    path = tmp_path / "out.txt"
    write_text_atomic(path, "one")
    write_text_atomic(path, "two")
    assert path.read_text() == "two"
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_bench_report_is_written_atomically(tmp_path, monkeypatch):
    import specplan.bench.report as report

    written = []
    monkeypatch.setattr(report, "write_text_atomic", lambda path, text: written.append(Path(path).name))
    report.BenchReport.write(type("Fake", (), {"to_dict": lambda self: {}, "markdown": lambda self: "m"})(), tmp_path)
    assert written == ["report.json", "report.md"]


def test_closed_stdout_ends_quietly(stored, capsys, monkeypatch):
    import builtins

    def closed(*args, **kwargs):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(builtins, "print", closed)
    monkeypatch.setattr("specplan.cli.main._stdout_closed", lambda: 141)
    code = main(["roofline", "profile.yaml"])
    assert code == 141 and capsys.readouterr().err == ""


def test_sigterm_exits_143(stored, capsys, monkeypatch):
    import signal

    import specplan.cli.roofline as roofline

    monkeypatch.setattr(roofline, "load_profile", lambda path: os.kill(os.getpid(), signal.SIGTERM))
    code = main(["roofline", "profile.yaml"])
    assert code == 143 and capsys.readouterr().err.strip() == "specplan: terminated"
