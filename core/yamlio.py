"""YAML in and out, only through ``yaml.safe_load`` semantics / ``yaml.safe_dump``, with ``schema_version``.

Reading is bounded: a document over :data:`MAX_DOCUMENT_BYTES` or holding an alias (``*name``)
is refused, since specplan's own files never use aliases and nested aliases expand
exponentially (a "billion laughs" profile). Writing is atomic (:mod:`specplan.core.files`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

from specplan.core.errors import SpecplanError
from specplan.core.files import write_text_atomic
from specplan.core.limits import MAX_DOCUMENT_BYTES

SCHEMA_VERSION = 1


class AliasError(yaml.MarkedYAMLError):
    """A document uses a YAML alias (``*name``); specplan's files never do."""


def refuse_aliases(text: str) -> None:
    """Raise :class:`AliasError` at the first alias (``*name``) of ``text``: the parse events
    alone (no object is built), so a billion-laughs document is refused before it expands."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise AliasError(None, None, f"alias *{event.anchor} is not allowed", event.start_mark)


class NoAliasDumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` that writes a value shared by two keys out twice, never as an alias,
    so that every file specplan writes is one :func:`safe_load_text` reads."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def safe_load_text(text: str) -> Any:
    """``yaml.safe_load`` of a document without aliases (:func:`refuse_aliases` first)."""
    refuse_aliases(text)
    return yaml.safe_load(text)


def read_text_bounded(path: Path, kind: str, error: type[SpecplanError]) -> str:
    """A file's UTF-8 text; ``error`` if it is too large or not UTF-8 text."""
    size = path.stat().st_size
    if size > MAX_DOCUMENT_BYTES:
        raise error(f"{path} is {size} bytes, more than a {kind} file can be ({MAX_DOCUMENT_BYTES}); "
                    f"pass a {kind}.yaml written by specplan")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path} is not UTF-8 text (byte {exc.start}); pass a {kind}.yaml written by specplan, "
                    "or re-save it as UTF-8") from None


def _parse(path: Path, kind: str, error: type[SpecplanError]) -> Any:
    try:
        return safe_load_text(read_text_bounded(path, kind, error))
    except AliasError as exc:
        raise error(f"{path} uses a YAML alias (line {exc.problem_mark.line + 1}); specplan's files have none, "
                    f"write the values out or regenerate it with `specplan {kind}`") from None
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" at line {line + 1}" if line is not None else ""
        raise error(f"{path} is not valid YAML{where}; fix the syntax or regenerate it") from None
    except RecursionError:
        raise error(f"{path} nests too deeply to be a {kind}; regenerate it with `specplan {kind}`") from None


def document_kind(document: Any) -> str:
    """``profile``, ``plan`` or ``other``: what a parsed specplan document is, by its keys."""
    if not isinstance(document, dict):
        return "other"
    if "stages" in document or "predicted" in document:
        return "plan"
    if "models" in document and "acceptance" in document:
        return "profile"
    return "other"


def read_document(path: str | Path, kind: str, error: type[SpecplanError],
                  versions: tuple[int, ...] = (SCHEMA_VERSION,)) -> dict[str, Any]:
    """Read a YAML mapping whose ``schema_version`` is one of ``versions`` (default: 1); raise
    ``error`` with a one-line fix otherwise."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{kind} file {path} does not exist; pass the path of a {kind}.yaml")
    document = _parse(path, kind, error)
    if not isinstance(document, dict):
        raise error(f"{path} is not a YAML mapping; regenerate it with `specplan {kind}`")
    found = document_kind(document)
    if kind in ("plan", "profile") and found in ("plan", "profile") and found != kind:
        hint = ("pass the profile it was solved from (its `profile: path:`)" if found == "plan"
                else "solve a plan from it first with `specplan plan`")
        raise error(f"{path} is a {found}, not a {kind}; {hint}")
    version = document.get("schema_version")
    if isinstance(version, bool) or version not in versions:
        readable = " or ".join(str(v) for v in versions)
        raise error(
            f"{path} has schema_version {version!r}, this specplan reads {readable}; "
            f"regenerate it with `specplan {kind}`"
        )
    return document


def write_document(path: str | Path, document: dict[str, Any]) -> None:
    """Write a mapping as YAML (block style, keys in insertion order), atomically."""
    text = yaml.dump(document, Dumper=NoAliasDumper, sort_keys=False, default_flow_style=None, width=100)
    write_text_atomic(path, text)


def mapping_sha256(document: dict[str, Any]) -> str:
    """``sha256:<hex>`` of a mapping's canonical YAML (keys sorted): the same mapping, however written, hashes alike."""
    return "sha256:" + hashlib.sha256(yaml.safe_dump(document, sort_keys=True).encode()).hexdigest()


def file_sha256(path: str | Path) -> str:
    """``sha256:<hex>`` of a file's bytes."""
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
