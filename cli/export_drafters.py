"""The drafter files an exported command loads, written in the engine's own format.

llama.cpp: a distilled model drafter (a Llama or Qwen2 ``save_pretrained`` folder) becomes one
GGUF file (:mod:`specplan.models.gguf_write`) that ``--spec-draft-model`` names. vLLM, SGLang and
TensorRT-LLM: a draft head of EAGLE-3's layout (``distill --kind head --layout eagle3``) becomes an EAGLE-3
checkpoint folder (:mod:`specplan.runtime.drafters.head_eagle3`); a folder that already is one
is named as it is. Files are
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


def head_layout(directory: str) -> str:
    """``eagle3`` / ``eagle1`` from a head's head.json, ``checkpoint`` for an EAGLE-3 checkpoint, else ``""``."""
    path = Path(directory).expanduser()
    try:
        document = json.loads((path / "head.json").read_text())
        return str(document.get("layout", "eagle1"))
    except (OSError, ValueError):
        pass
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return ""
    return "checkpoint" if "LlamaForCausalLMEagle3" in (config.get("architectures") or []) else ""


def planned_heads(profile, output: Path) -> tuple[tuple[str, str], ...]:
    """(head DIR, EAGLE-3 checkpoint folder) for every head vLLM, SGLang and TensorRT-LLM can load once written."""
    planned = []
    for model in profile.models:
        if not model.source.startswith("head:"):
            continue
        directory = model.source.partition(":")[2]
        layout = head_layout(directory)
        if layout == "checkpoint":
            planned.append((directory, directory))
        elif layout == "eagle3":
            planned.append((directory, str(output / file_name(directory, "-eagle3"))))
    return tuple(planned)


def write_head_checkpoint(stage, source: str, planned: tuple[tuple[str, str], ...]) -> list[str]:
    """Write the EAGLE-3 checkpoint the vLLM / SGLang command or TensorRT-LLM file names for ``stage``'s head;
    the files written."""
    directory = source.partition(":")[2]
    path = dict(planned).get(directory)
    if stage is None or not source.startswith("head:") or path is None or path == directory:
        return []
    from specplan.runtime.drafters.head_eagle3 import EAGLE3_CONFIG, EAGLE3_WEIGHTS, write_eagle3
    from specplan.runtime.drafters.head_model import read_head

    write_eagle3(read_head(directory), path)
    return [str(Path(path) / EAGLE3_CONFIG), str(Path(path) / EAGLE3_WEIGHTS)]
