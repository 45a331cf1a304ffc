"""A GGUF whose conversion the cache cannot hold (here $SPECPLAN_CACHE is a file) still converts,
into a temporary folder for the one run, after one line saying so; the weights are the cached
conversion's."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from specplan.models.load import convert_gguf, default_gguf_path


def test_conversion_without_a_usable_cache_runs_in_a_temporary_folder(default_model_dir, tmp_path, monkeypatch, capsys):
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache folder should be")
    monkeypatch.setenv("SPECPLAN_CACHE", str(not_a_folder))
    folder = convert_gguf(default_gguf_path())
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot build cache entry" in err[0] and "temporary folder for this run only" in err[0]
    assert not Path(folder).is_relative_to(not_a_folder) and not_a_folder.read_text().startswith("a file")
    for name in ("config.json", "model.safetensors"):
        assert filecmp.cmp(Path(folder) / name, Path(default_model_dir) / name, shallow=False)


def test_a_failing_temporary_conversion_is_one_line(tmp_path, monkeypatch):
    import errno
    import tempfile

    from specplan.core.errors import CacheError

    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("")
    monkeypatch.setenv("SPECPLAN_CACHE", str(not_a_folder))

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkdtemp", full_disk)  # no room for a temporary folder either
    with pytest.raises(CacheError, match="temporary folder either: No space left on device") as raised:
        convert_gguf(default_gguf_path())
    assert "\n" not in str(raised.value)


def test_the_same_gguf_elsewhere_reuses_its_conversion(tmp_path, monkeypatch):
    """The conversion's cache entry is named by the GGUF's contents, not its path: a copy in
    another folder (a reinstall, a fresh clone's virtual environment) maps to the same entry, a
    file whose header differs to another."""
    from specplan.models.load import _gguf_cache_dir

    monkeypatch.setenv("SPECPLAN_CACHE", str(tmp_path / "cache"))
    data = b"GGUF" + bytes(range(256)) * 8
    first, second, other = tmp_path / "a" / "model.gguf", tmp_path / "b" / "model.gguf", tmp_path / "c" / "model.gguf"
    for path, content in ((first, data), (second, data), (other, b"GGUG" + data[4:])):
        path.parent.mkdir()
        path.write_bytes(content)
    assert _gguf_cache_dir(first) == _gguf_cache_dir(second)
    assert _gguf_cache_dir(first)[0] != _gguf_cache_dir(other)[0]
