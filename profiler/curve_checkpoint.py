"""Latency curves kept beside a profile's output while the rest is measured, so that an
interrupted ``specplan profile`` resumes with ``--resume`` instead of timing its curves again
(docs/guide.md, "Files specplan writes, and the bounds on what it reads").

The curves are the first, and on a 1.5B target the longest, part of a profile (minutes of
timed forwards); acceptance is measured after them. Once they are measured they are written,
atomically, to ``.<output name>.curves.yaml`` beside the output, with the key they were measured
under: the target's fingerprint, every model's id and source, the device, the context, the
passes, the runtime, the widths and batch sizes, and specplan's version. ``--resume`` reuses them
only when the key matches in full; otherwise they are measured again (and the line says why).
The checkpoint is removed once the profile is written.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from specplan.core.errors import ProfileError
from specplan.core.profile import LatencyCurve, curve_from_dict
from specplan.core.yamlio import read_document, write_document

SCHEMA_VERSION = 1


def checkpoint_path(output: str | Path) -> Path:
    """``dir/.profile.yaml.curves.yaml`` for ``dir/profile.yaml``."""
    output = Path(output)
    return output.with_name(f".{output.name}.curves.yaml")


def save_curves(path: Path, key: dict[str, Any], curves: dict[str, LatencyCurve],
                batched: dict[str, tuple[LatencyCurve, ...]]) -> None:
    """Write the curves and their key (atomically: an interrupted write leaves no checkpoint)."""
    document = {"schema_version": SCHEMA_VERSION, "key": key,
                "curves": {model: _record(curve) for model, curve in curves.items()},
                "batched": {model: [_record(curve) for curve in batch] for model, batch in batched.items()}}
    write_document(path, document)


def _record(curve: LatencyCurve) -> dict[str, Any]:
    record = asdict(curve)
    record["n"], record["ms"] = list(curve.n), list(curve.ms)
    return record


def load_curves(path: Path, key: dict[str, Any]) -> tuple[dict, dict] | str:
    """(curves, batched) measured under ``key``, or the one-line reason they cannot be reused."""
    if not path.is_file():
        return f"no checkpoint at {path}"
    try:
        document = read_document(path, "curve checkpoint", ProfileError)
        if document.get("key") != key:
            changed = sorted(k for k in set(key) | set(document.get("key") or {})
                             if (document.get("key") or {}).get(k) != key.get(k))
            return f"the checkpoint {path} was measured under another {', '.join(changed)}"
        curves = {str(m): curve_from_dict(c, f"{path}: curves.{m}") for m, c in document["curves"].items()}
        batched = {str(m): tuple(curve_from_dict(c, f"{path}: batched.{m}") for c in batch)
                   for m, batch in document["batched"].items()}
    except (ProfileError, KeyError, TypeError, AttributeError) as exc:
        return f"the checkpoint {path} is unreadable ({str(exc).splitlines()[0][:120]})"
    if set(curves) != set(key["models"]) or set(batched) != set(key["models"]):
        return f"the checkpoint {path} lacks some model's curves"
    return curves, batched
