"""YAML in and out, only through ``yaml.safe_load`` / ``yaml.safe_dump``, with ``schema_version``."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml

from specplan.core.errors import SpecplanError

SCHEMA_VERSION = 1


def read_document(path: str | Path, kind: str, error: type[SpecplanError]) -> dict[str, Any]:
    """Read a YAML mapping with ``schema_version: 1``; raise ``error`` with a one-line fix otherwise."""
    path = Path(path)
    if not path.is_file():
        raise error(f"{kind} file {path} does not exist; pass the path of a {kind}.yaml")
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" at line {line + 1}" if line is not None else ""
        raise error(f"{path} is not valid YAML{where}; fix the syntax or regenerate it") from None
    if not isinstance(document, dict):
        raise error(f"{path} is not a YAML mapping; regenerate it with `specplan {kind}`")
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise error(
            f"{path} has schema_version {version!r}, this specplan reads {SCHEMA_VERSION}; "
            f"regenerate it with `specplan {kind}`"
        )
    return document


def write_document(path: str | Path, document: dict[str, Any]) -> None:
    """Write a mapping as YAML (block style, keys in insertion order)."""
    text = yaml.safe_dump(document, sort_keys=False, default_flow_style=None, width=100)
    Path(path).write_text(text, encoding="utf-8")


def file_sha256(path: str | Path) -> str:
    """``sha256:<hex>`` of a file's bytes."""
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()
