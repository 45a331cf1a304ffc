"""``specplan cache list | verify | clear`` on a temporary ``$SPECPLAN_CACHE``: output and exit codes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specplan.cli.main import main
from specplan.models.cache_entry import open_entry, try_lock


def _build(temporary: Path) -> None:
    (temporary / "config.json").write_text("{}")
    (temporary / "model.safetensors").write_bytes(b"\0" * 4096)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache with two whole entries, one unchecked file and one folder without a manifest."""
    root = tmp_path / "cache"
    monkeypatch.setenv("SPECPLAN_CACHE", str(root))
    open_entry(root / "models" / "small-1234", "key-a", _build)
    open_entry(root / "models" / "other-5678", "key-b", _build)
    (root / "models" / "fetched.gguf").write_bytes(b"GGUF" * 10)
    (root / "aot" / "abcdef").mkdir(parents=True)
    (root / "aot" / "abcdef" / "package.yaml").write_text("schema_version: 1\n")
    return root


def run_cli(argv, capsys) -> tuple[int, str, str]:
    code = main(["cache", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _line(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.startswith(name + " "))


def _flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[7] ^= 0x10
    path.write_bytes(bytes(data))


def test_list_names_each_entry_its_size_and_state(cache, capsys):
    code, out, err = run_cli(["list"], capsys)
    assert code == 0 and err == ""
    size = sum(path.stat().st_size for path in (cache / "models" / "small-1234").iterdir())  # manifest included
    assert f"{size / 1024:.1f} KiB  ok (sizes checked)" in _line(out, "models/small-1234")
    assert "unchecked (no manifest)" in _line(out, "models/fetched.gguf")
    assert "unchecked (no manifest)" in _line(out, "aot/abcdef")
    assert out.splitlines()[-1] == f"specplan: 4 entries in {cache}, 0 damaged"


def test_list_reports_a_truncated_file(cache, capsys):
    (cache / "models" / "small-1234" / "model.safetensors").write_bytes(b"\0" * 100)
    code, out, _ = run_cli(["list"], capsys)
    assert code == 0
    assert "DAMAGED: file model.safetensors: size 100, manifest 4096" in _line(out, "models/small-1234")
    assert "1 damaged" in out.splitlines()[-1]


def test_verify_exits_1_on_a_flipped_bit_and_0_when_whole(cache, capsys):
    code, out, _ = run_cli(["verify"], capsys)
    assert code == 0 and "ok (sha256 checked)" in _line(out, "models/other-5678")
    _flip_a_bit(cache / "models" / "other-5678" / "model.safetensors")
    code, out, _ = run_cli(["list"], capsys)
    assert code == 0 and "ok" in _line(out, "models/other-5678")  # sizes alone do not see it
    code, out, _ = run_cli(["verify"], capsys)
    assert code == 1
    assert "DAMAGED: file model.safetensors: sha256 differs" in _line(out, "models/other-5678")
    assert "ok (sha256 checked)" in _line(out, "models/small-1234")


def test_clear_one_entry_by_name_or_category_name(cache, capsys):
    code, out, _ = run_cli(["clear", "small-1234"], capsys)
    assert code == 0 and "removed 1 entry" in out
    assert not (cache / "models" / "small-1234").exists() and (cache / "models" / "other-5678").is_dir()
    code, out, _ = run_cli(["clear", "aot/abcdef"], capsys)
    assert code == 0 and not (cache / "aot" / "abcdef").exists()


def test_clear_all_removes_every_entry_and_dead_builders_leftovers(cache, capsys):
    (cache / "models" / ".small-1234.tmp-dead").mkdir()
    code, out, _ = run_cli(["clear", "--all"], capsys)
    assert code == 0 and "removed 4 entries" in out
    assert [path for path in cache.rglob("*") if not path.is_dir() and not path.name.endswith(".lock")] == []
    assert not (cache / "models" / ".small-1234.tmp-dead").exists()


def test_clear_leaves_an_entry_being_built(cache, capsys):
    lock = try_lock(cache / "models" / "small-1234")
    try:
        code, out, _ = run_cli(["clear", "models/small-1234"], capsys)
    finally:
        lock.release()
    assert code == 0 and "being built by another process" in out and "removed 0 entries" in out
    assert (cache / "models" / "small-1234").is_dir()


@pytest.mark.parametrize("argv, fragment", [
    (["clear", "no-such-entry"], "no cache entry 'no-such-entry'"),
    (["clear"], "say what to clear"),
    (["clear", "small-1234", "--all"], "say what to clear"),
])
def test_bad_clear_is_one_line_exit_2(cache, capsys, argv, fragment):
    code, out, err = run_cli(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and fragment in err and "Traceback" not in err
    assert (cache / "models" / "small-1234").is_dir()


def test_ambiguous_name_is_one_line_exit_2(cache, capsys):
    (cache / "quantized" / "small-1234").mkdir(parents=True)
    code, _, err = run_cli(["clear", "small-1234"], capsys)
    assert code == 2 and "names 2 cache entries" in err and err.count("\n") == 1


@pytest.mark.parametrize("action", ["list", "verify", "clear --all"])
def test_missing_cache_folder_is_one_line_exit_2(tmp_path, monkeypatch, capsys, action):
    monkeypatch.setenv("SPECPLAN_CACHE", str(tmp_path / "nowhere"))
    code, _, err = run_cli(action.split(), capsys)
    assert code == 2 and err.count("\n") == 1 and "does not exist" in err


def test_read_only_cache_folder_refuses_clear_in_one_line(cache, capsys, monkeypatch):
    cache.chmod(0o555)
    if os.geteuid() == 0:  # root writes into a read-only folder: refuse as a read-only file system would
        access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode: access(path, mode) and not (
            mode & os.W_OK and Path(path) == cache))
    try:
        code, _, err = run_cli(["clear", "--all"], capsys)
        listed, out, _ = run_cli(["list"], capsys)
    finally:
        cache.chmod(0o755)
    assert code == 2 and err.count("\n") == 1 and "is not writable" in err
    assert listed == 0 and "models/small-1234" in out  # reading a read-only cache is fine
    assert (cache / "models" / "small-1234").is_dir()
