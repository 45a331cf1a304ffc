"""The drafter files an exported command loads, written in the engine's own format.

llama.cpp: a distilled model drafter (a Llama or Qwen2 ``save_pretrained`` folder) becomes one
GGUF file (:mod:`specplan.models.gguf_write`) that ``--spec-draft-model`` names. Files are
planned before the plan is re-solved (so the engine's search may pick the drafter) and written
only for the drafter the exported command uses.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from specplan.core.errors import ModelError
from specplan.models.gguf_write import ARCHITECTURES


def model_folder(source: str) -> Path | None:
    """The folder of a ``model:`` source when it is a save_pretrained Llama / Qwen2 folder here."""
    path = Path(source).expanduser()
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return path if config.get("model_type") in ARCHITECTURES else None


def file_name(source: str, suffix: str) -> str:
    """``<folder name>.gguf`` (characters other than letters, digits, ``._-`` become ``-``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", Path(source).expanduser().resolve().name) + suffix


def planned_gguf(profile, output: Path) -> tuple[tuple[str, str], ...]:
    """(MODEL source, GGUF path to write) for every model drafter that is a convertible folder."""
    planned = []
    for model in profile.models:
        if model.id == profile.target.id or not model.source.startswith("model:"):
            continue
        source = model.source.partition(":")[2]
        if not source.endswith(".gguf") and model_folder(source) is not None:
            planned.append((source, str(output / file_name(source, ".gguf"))))
    return tuple(planned)


def write_llama_cpp_drafter(stage, source: str, names, planned: tuple[tuple[str, str], ...]) -> list[str]:
    """Write the GGUF the llama.cpp command names for ``stage``'s model drafter; the files written."""
    from specplan.models.gguf_write import gguf_string, write_gguf
    from specplan.models.load import gguf_file

    folder = source.partition(":")[2]
    path = dict(planned).get(folder)
    if stage is None or not source.startswith("model:") or path is None:
        return []
    try:
        target_gguf = gguf_file(names.target)
    except ModelError:
        target_gguf = None
    pre = (gguf_string(target_gguf, "tokenizer.ggml.pre") if target_gguf is not None else None) or "default"
    write_gguf(folder, path, tokenizer_pre=pre)
    return [path]
