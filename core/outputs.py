"""Output locations, checked before any work starts (docs/guide.md, "Files specplan writes").

A command that measures for minutes must not learn at the end that it cannot write its
result. Before the work: the output is not a folder (or, for a report folder, not a file),
the nearest existing folder above it is writable (missing folders are created when the file is
written, :mod:`specplan.core.files`), it is not one of the command's inputs, and it does not
hold a profile that a plan would replace or the reverse.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import yaml

from specplan.core.errors import OutputError, SpecplanError
from specplan.core.yamlio import document_kind, read_text_bounded, safe_load_text


def _existing_ancestor(path: Path) -> Path:
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _check_location(path: Path, flag: str) -> None:
    folder = _existing_ancestor(path)
    if not folder.is_dir():
        raise OutputError(f"{flag} {path}: {folder} is a file, not a folder; choose another path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{flag} {path}: cannot write in {folder} (permission denied); choose another path")


def stored_kind(path: Path) -> str | None:
    """``profile``, ``plan`` or ``other`` for an existing file, None if there is none."""
    if not path.is_file():
        return None
    try:
        return document_kind(safe_load_text(read_text_bounded(path, "specplan", SpecplanError)))
    except (SpecplanError, OSError, yaml.YAMLError, RecursionError):  # unreadable or not YAML: not one of ours
        return "other"


def check_output_file(path: str | Path, *, kind: str, flag: str = "-o",
                      inputs: Iterable[str | Path] = ()) -> Path:
    """Refuse an output file that cannot be written or that would destroy an input or a file of
    another kind (``kind``: ``profile``, ``plan`` or ``other``); return it as a Path."""
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{flag} {path} is a folder; pass a file path such as {path / (kind + '.yaml')}")
    _check_location(path, flag)
    for source in inputs:
        if Path(source).exists() and path.exists() and path.resolve() == Path(source).resolve():
            raise OutputError(f"{flag} {path} is also this command's input; write to another path")
    found = stored_kind(path)
    if found in ("profile", "plan") and found != kind:
        what = kind if kind in ("profile", "plan") else "this output"
        raise OutputError(f"{path} holds a {found}, which {what} would replace; pass {flag} another path "
                            f"(or delete {path} first if you mean to)")
    return path


def check_output_folder(path: str | Path, *, flag: str) -> Path:
    """Refuse an output folder that is a file or cannot be created or written; return it."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {path} is a file; pass a folder (it is created if missing)")
    if path.is_dir():
        if not os.access(path, os.W_OK | os.X_OK):
            raise OutputError(f"{flag} {path}: cannot write in it (permission denied); choose another folder")
        return path
    _check_location(path / "x", flag)
    return path
