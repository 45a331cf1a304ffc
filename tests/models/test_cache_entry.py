"""Cache entries (models/cache_entry.py): concurrent builders, a killed builder, damaged files.

The builders are fake (a few small files and a sleep) and run in real processes of this
interpreter, so the lock and the atomic rename are exercised as `specplan` processes meet them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specplan.models.cache_entry import MANIFEST, check_entry, open_entry, read_manifest

KEY = "fake-key-1"

BUILDER = """
import sys, time
from pathlib import Path
from specplan.models.cache_entry import open_entry, read_manifest

folder, counter, pause, go = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), Path(sys.argv[4])
while not go.exists():
    time.sleep(0.01)

def build(temporary):
    with counter.open("a") as log:
        log.write("build\\n")
    (temporary / "a.txt").write_text("alpha " * 100)
    (temporary / "started").write_text("")
    time.sleep(pause)
    (temporary / "sub").mkdir()
    (temporary / "sub" / "b.bin").write_bytes(bytes(range(256)) * 10)

opened = open_entry(folder, sys.argv[5], build)
print(sorted((item.path, item.size, item.sha256) for item in read_manifest(opened).files))
"""


def _start(tmp_path: Path, folder: Path, pause: float, key: str = KEY) -> subprocess.Popen:
    script = tmp_path / "builder.py"
    script.write_text(BUILDER)
    return subprocess.Popen([sys.executable, str(script), str(folder), str(tmp_path / "builds.log"), str(pause),
                             str(tmp_path / "go"), key], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process: subprocess.Popen, timeout: float = 30) -> tuple[str, str]:
    """The process's output; killed (and the test failed) if it does not end in ``timeout`` s."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise


def _builds(tmp_path: Path) -> int:
    log = tmp_path / "builds.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def _build_small(counter: list):
    def build(temporary: Path) -> None:
        counter.append(1)
        (temporary / "a.txt").write_text("alpha " * 100)
        (temporary / "sub").mkdir()
        (temporary / "sub" / "b.bin").write_bytes(bytes(range(256)) * 10)
    return build


def _leftovers(folder: Path) -> list[Path]:
    return [path for path in folder.parent.iterdir() if path.name.startswith(f".{folder.name}.tmp-")]


def test_concurrent_builders_build_once_and_agree(tmp_path):
    folder = tmp_path / "cache" / "models" / "entry"
    processes = [_start(tmp_path, folder, pause=1.0) for _ in range(4)]
    (tmp_path / "go").write_text("")
    results = [_finish(process) for process in processes]
    assert [process.returncode for process in processes] == [0] * 4, [err for _, err in results]
    assert _builds(tmp_path) == 1
    outputs = {out for out, _ in results}
    assert len(outputs) == 1 and "a.txt" in outputs.pop()
    assert any("waiting for another process building cache entry" in err for _, err in results)
    assert check_entry(folder, KEY, verify=True).whole
    assert _leftovers(folder) == []


def test_killed_builder_leaves_nothing_published_and_a_rebuild_works(tmp_path):
    folder = tmp_path / "cache" / "models" / "entry"
    (tmp_path / "go").write_text("")
    process = _start(tmp_path, folder, pause=60)
    deadline = time.monotonic() + 30
    while not list(folder.parent.glob(f".{folder.name}.tmp-*/started")) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(process.pid, signal.SIGKILL)
    _finish(process)
    assert not folder.exists() and len(_leftovers(folder)) == 1
    rebuild = _start(tmp_path, folder, pause=0)
    out, err = _finish(rebuild, timeout=15)  # a stale lock would hang here
    assert rebuild.returncode == 0, err
    assert _builds(tmp_path) == 2 and "waiting" not in err
    assert check_entry(folder, KEY, verify=True).whole
    assert sorted(path.name for path in folder.rglob("*") if path.is_file()) == ["a.txt", "b.bin", MANIFEST, "started"]
    assert _leftovers(folder) == []


def test_truncated_file_is_found_by_size_and_rebuilt(tmp_path, capsys):
    folder, builds = tmp_path / "entry", []
    open_entry(folder, KEY, _build_small(builds))
    (folder / "a.txt").write_text("alpha")
    state = check_entry(folder, KEY)
    assert state.problem == "file a.txt: size 5, manifest 600"
    open_entry(folder, KEY, _build_small(builds))
    assert len(builds) == 2 and check_entry(folder, KEY, verify=True).whole
    assert (f"cache entry {folder} is incomplete or corrupt (file a.txt: size 5, manifest 600); rebuilding"
            in capsys.readouterr().err)


def test_flipped_bit_is_found_by_verify_and_rebuilt(tmp_path, capsys):
    folder, builds = tmp_path / "entry", []
    open_entry(folder, KEY, _build_small(builds))
    damaged = folder / "sub" / "b.bin"
    data = bytearray(damaged.read_bytes())
    data[100] ^= 0x01
    damaged.write_bytes(bytes(data))
    assert check_entry(folder, KEY).whole  # sizes only: a flipped bit is not seen
    assert check_entry(folder, KEY, verify=True).problem == "file sub/b.bin: sha256 differs from the manifest's"
    open_entry(folder, KEY, _build_small(builds), verify=True)
    assert len(builds) == 2 and check_entry(folder, KEY, verify=True).whole
    assert "incomplete or corrupt (file sub/b.bin: sha256 differs" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["no manifest", "other key", "missing file", "bad manifest"])
def test_entry_without_a_good_manifest_is_rebuilt(tmp_path, capsys, damage):
    folder, builds = tmp_path / "entry", []
    open_entry(folder, KEY, _build_small(builds))
    if damage == "no manifest":  # as an older specplan left it
        (folder / MANIFEST).unlink()
    elif damage == "other key":
        open_entry(folder, "another-key", _build_small(builds))
    elif damage == "missing file":
        (folder / "sub" / "b.bin").unlink()
    else:
        (folder / MANIFEST).write_text("schema_version: 1\nfiles: 3\n")
    assert not check_entry(folder, KEY).whole
    open_entry(folder, KEY, _build_small(builds))
    assert read_manifest(folder).key == KEY and check_entry(folder, KEY, verify=True).whole
    assert "incomplete or corrupt" in capsys.readouterr().err
    assert _leftovers(folder) == []


def test_whole_entry_is_reused_without_building(tmp_path, capsys):
    folder, builds = tmp_path / "entry", []
    open_entry(folder, KEY, _build_small(builds))
    open_entry(folder, KEY, _build_small(builds), verify=True)
    assert len(builds) == 1 and capsys.readouterr().err == ""
    manifest = read_manifest(folder)
    assert [(item.path, item.size) for item in manifest.files] == [("a.txt", 600), ("sub/b.bin", 2560)]
    assert all(item.sha256.startswith("sha256:") for item in manifest.files)


def test_failed_build_publishes_nothing(tmp_path):
    folder = tmp_path / "entry"

    def build(temporary: Path) -> None:
        (temporary / "a.txt").write_text("half")
        raise RuntimeError("the builder failed")

    with pytest.raises(RuntimeError):
        open_entry(folder, KEY, build)
    assert not folder.exists() and _leftovers(folder) == []


def test_full_disk_during_a_rebuild_is_one_line_and_keeps_the_old_entry_unloaded(tmp_path, capsys):
    """A rebuild of a damaged entry that runs out of space mid-write: a CacheError that says what to do,
    no temporary folder left, the damaged entry still refused (never loaded) and rebuilt once space is back."""
    import errno

    from specplan.core.errors import CacheError

    folder, builds = tmp_path / "entry", []
    open_entry(folder, KEY, _build_small(builds))
    (folder / "a.txt").write_text("truncated")

    def full_disk(temporary: Path) -> None:
        (temporary / "a.txt").write_text("alpha " * 50)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CacheError, match="No space left on device; free space") as raised:
        open_entry(folder, KEY, full_disk)
    assert "\n" not in str(raised.value)
    assert _leftovers(folder) == [] and not check_entry(folder, KEY).whole
    open_entry(folder, KEY, _build_small(builds))
    assert len(builds) == 2 and check_entry(folder, KEY, verify=True).whole
