"""One rule for every folder specplan builds into its cache (``$SPECPLAN_CACHE``).

An entry is built in a private temporary folder beside its final place (``.<name>.tmp-XXXX``,
unique per process), gets a ``manifest.yaml`` (``schema_version: 1``, the key it was built for,
and each file's relative path, size and sha256), and is published by one atomic rename. So a
reader sees either no entry or a whole one, never a half-written one.

Builders of the same entry serialise on a lock file beside it (``.<name>.lock``, the ``filelock``
package; the system releases it when its holder dies, so a killed builder leaves no stale lock).
A process that finds the lock held prints one line and waits, then reuses what the other built.
Whoever holds the lock removes the temporary folders that dead builders left.

Opening an entry checks it: the manifest exists, names the wanted key, and every file has its
recorded size (always; one ``stat`` per file); with ``verify=True`` every file's sha256 too. A
missing, mismatching or manifest-less entry (an older specplan's) is said in one line on stderr
and rebuilt, never loaded.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import filelock

from specplan.core.errors import CacheError, SpecplanError
from specplan.core.yamlio import read_document, write_document

MANIFEST = "manifest.yaml"
SCHEMA_VERSION = 1
TEMPORARY_MARK = ".tmp-"


@dataclass(frozen=True)
class EntryFile:
    """One file of an entry, as its manifest records it."""

    path: str  # relative to the entry folder, with forward slashes
    size: int
    sha256: str  # sha256:<hex>


@dataclass(frozen=True)
class Manifest:
    """An entry's ``manifest.yaml``: the key it was built for and its files."""

    key: str
    files: tuple[EntryFile, ...]

    def as_document(self) -> dict:
        """The YAML mapping written to ``manifest.yaml``."""
        return {"schema_version": SCHEMA_VERSION, "key": self.key,
                "files": [{"path": item.path, "size": item.size, "sha256": item.sha256} for item in self.files]}


@dataclass(frozen=True)
class EntryState:
    """What checking an entry found: ``problem`` is None for a whole entry, else one phrase."""

    folder: Path
    problem: str | None
    size: int  # bytes of the files found in the folder

    @property
    def whole(self) -> bool:
        """True when the entry can be loaded."""
        return self.problem is None


def file_digest(path: Path) -> str:
    """``sha256:<hex>`` of a file, read in 1 MiB blocks (entries hold GiB-sized weights)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return "sha256:" + digest.hexdigest()


def describe_files(folder: Path) -> tuple[EntryFile, ...]:
    """Every file under ``folder`` (the manifest excluded), sorted, with its size and sha256."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.relative_to(folder).as_posix() != MANIFEST:
            found.append(EntryFile(path.relative_to(folder).as_posix(), path.stat().st_size, file_digest(path)))
    return tuple(found)


class _ManifestError(SpecplanError):
    """A manifest that is not one this version reads (turned into a problem phrase, never raised out)."""


def read_manifest(folder: Path) -> Manifest | None:
    """The entry's manifest, or None when it has none or it is unreadable or malformed."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        document = read_document(path, "cache manifest", _ManifestError)
        files = tuple(EntryFile(str(item["path"]), int(item["size"]), str(item["sha256"]))
                      for item in document["files"])
        return Manifest(str(document["key"]), files)
    except (_ManifestError, KeyError, TypeError, ValueError, OSError):
        return None


def folder_size(folder: Path) -> int:
    """Bytes of every file under ``folder`` (0 for a missing folder)."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else 0


def check_entry(folder: Path, key: str | None = None, verify: bool = False) -> EntryState:
    """Check the entry in ``folder``: manifest, key (when given), sizes, and digests if ``verify``."""
    folder = Path(folder)
    if not folder.is_dir():
        return EntryState(folder, "missing", 0)
    size = folder_size(folder)
    manifest = read_manifest(folder)
    if manifest is None:
        reason = "unreadable" if (folder / MANIFEST).exists() else "no"
        return EntryState(folder, f"{reason} {MANIFEST}: written by an older specplan or unfinished", size)
    if key is not None and manifest.key != key:
        return EntryState(folder, f"built for key {manifest.key!r}, wanted {key!r}", size)
    for item in manifest.files:
        path = folder / item.path
        found = path.stat().st_size if path.is_file() else None
        if found != item.size:
            shown = "missing" if found is None else f"size {found}"
            return EntryState(folder, f"file {item.path}: {shown}, manifest {item.size}", size)
    if verify:
        for item in manifest.files:
            if file_digest(folder / item.path) != item.sha256:
                return EntryState(folder, f"file {item.path}: sha256 differs from the manifest's", size)
    return EntryState(folder, None, size)


def open_entry(folder: Path, key: str, build: Callable[[Path], None], verify: bool = False,
               announce: Callable[[], None] | None = None) -> Path:
    """``folder`` holding a whole entry built for ``key``: the one there, or one ``build``
    (writes the entry's files into the empty folder it is given) makes now, under the entry's
    lock. ``announce`` is called just before this process builds (a progress line).
    Raises CacheError (one line) when the cache folder cannot be written."""
    folder = Path(folder)
    if check_entry(folder, key, verify).whole:
        return folder
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with EntryLock(folder):
            state = check_entry(folder, key, verify)
            if state.whole:
                return folder
            remove_leftovers(folder)
            if state.problem != "missing":
                print(f"specplan: cache entry {folder} is incomplete or corrupt ({state.problem}); rebuilding",
                      file=sys.stderr, flush=True)
            if announce is not None:
                announce()
            _build_and_publish(folder, key, build)
    except OSError as error:
        raise CacheError(f"cannot build cache entry {folder}: {error.strerror or type(error).__name__}; "
                         "free space, make $SPECPLAN_CACHE writable or point it elsewhere") from None
    return folder


def entry_lock_path(folder: Path) -> Path:
    """The lock file that builders (and ``specplan cache clear``) of ``folder`` take."""
    return folder.with_name(f".{folder.name}.lock")


def _lock_file(folder: Path) -> filelock.FileLock:
    """The entry's lock (not yet acquired); one per call, shared by no thread."""
    return filelock.FileLock(str(entry_lock_path(folder)), thread_local=False)


class EntryLock:
    """Hold the entry's lock; when another process holds it, say so in one line and wait."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.lock = _lock_file(folder)

    def __enter__(self):
        try:
            self.lock.acquire(timeout=0)
        except filelock.Timeout:
            print(f"specplan: waiting for another process building cache entry {self.folder}",
                  file=sys.stderr, flush=True)
            self.lock.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()


def try_lock(folder: Path) -> filelock.FileLock | None:
    """The entry's lock, acquired, or None when another process holds it (a build under way)."""
    lock = _lock_file(folder)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        return None
    return lock


def temporary_prefix(folder: Path) -> str:
    return f".{folder.name}{TEMPORARY_MARK}"


def remove_leftovers(folder: Path) -> None:
    """Remove what earlier builders of ``folder`` (an entry folder or a single file) left behind,
    temporary folders or files: with the lock held, none is live."""
    for leftover in folder.parent.glob(temporary_prefix(folder) + "*"):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)


def _build_and_publish(folder: Path, key: str, build: Callable[[Path], None]) -> None:
    """Build into a private temporary folder, write its manifest, then rename it into place."""
    temporary = Path(tempfile.mkdtemp(prefix=temporary_prefix(folder), dir=folder.parent))
    try:
        build(temporary)
        write_document(temporary / MANIFEST, Manifest(key, describe_files(temporary)).as_document())
        _sync_files(temporary)
        os.chmod(temporary, 0o777 & ~_umask())
        if folder.exists():
            remove_entry(folder)
        os.rename(temporary, folder)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def remove_entry(folder: Path) -> None:
    """Remove an entry: renamed aside first (it disappears at once), then deleted."""
    aside = Path(tempfile.mkdtemp(prefix=temporary_prefix(folder), dir=folder.parent))
    os.rename(folder, aside / folder.name)  # a folder or a file alike
    shutil.rmtree(aside, ignore_errors=True)


def _sync_files(folder: Path) -> None:
    """fsync every file, so that the published entry survives a power cut whole."""
    for path in folder.rglob("*"):
        if path.is_file():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
