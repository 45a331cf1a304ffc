"""Load a model folder's safetensors weights at the dtype asked, one tensor at a time.

transformers memory-maps a safetensors file for the whole of a load and casts from the
mapping; every page it reads stays in the process until the load ends. A bfloat16 model
loaded from the float32 copy of a GGUF (models/load.py) therefore peaked at the float32
file plus its own bfloat16 weights: `specplan run` of the 1.5B + 0.5B testbed in bfloat16
reached 10.97 GB resident for 4.8 GB of bfloat16 weights.

Here each tensor is read with pread(2) (safetensors' ``pread`` backend: nothing is mapped),
cast, and its float32 buffer freed before the next is read; a tensor larger than
``CHUNK_BYTES`` is read and cast in row blocks into its final buffer. A load holds the model
at its own dtype plus one block. The model is then built by transformers from that state dict
(``from_pretrained(None, config=..., state_dict=...)``: the same key renaming, weight tying
and buffers as a load from the folder), so the weights equal the float32 ones cast by
``Tensor.to``, bit for bit, and a float32 load reads the float32 weights unchanged.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from specplan.core.errors import ModelError
from specplan.core.files import read_json_object

CHUNK_BYTES = 64 * 2**20  # the largest float32 block read at once (the 1.5B's embedding is 0.9 GB)
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def safetensors_files(folder: Path) -> list[Path] | None:
    """The folder's weight files: ``model.safetensors`` or the shards its index names; None when
    it holds no safetensors weights (``pytorch_model.bin``: transformers loads those)."""
    if (folder / SINGLE_FILE).is_file():
        return [folder / SINGLE_FILE]
    index = folder / INDEX_FILE
    if not index.is_file():
        return None
    fix = f"delete {folder} so that it is made again, or pass another model"
    weight_map = read_json_object(index, fix, ModelError).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelError(f"{index} has no weight_map; {fix}")
    return [folder / name for name in sorted(set(weight_map.values()))]


FLOATING = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_tensor(reader, name: str, dtype: torch.dtype) -> torch.Tensor:
    """Tensor ``name`` of an open ``safe_open`` reader: a floating one cast to ``dtype`` (in row
    blocks of at most ``CHUNK_BYTES`` of the stored type when it is larger), others as stored."""
    tensor_slice = reader.get_slice(name)
    stored = FLOATING.get(tensor_slice.get_dtype())
    shape = tensor_slice.get_shape()
    if stored is None or stored == dtype:
        return reader.get_tensor(name)
    row_bytes = stored.itemsize * math.prod(shape[1:])
    if not shape or row_bytes * shape[0] <= CHUNK_BYTES:
        return reader.get_tensor(name).to(dtype)
    rows = max(1, CHUNK_BYTES // max(1, row_bytes))
    result = torch.empty(shape, dtype=dtype)
    for start in range(0, shape[0], rows):
        stop = min(start + rows, shape[0])  # a safetensors slice past the end is an error, not clipped
        result[start:stop] = tensor_slice[start:stop]  # cast on assignment
    return result


def read_state_dict(files: list[Path], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every tensor of ``files`` (floating ones at ``dtype``), read without mapping the files;
    ModelError (one line) for a file that is not safetensors (truncated, overwritten)."""
    from safetensors import SafetensorError, safe_open

    state = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt", device="cpu", backend="pread") as reader:
                for name in reader.keys():
                    state[name] = read_tensor(reader, name, dtype)
        except SafetensorError as error:
            first = (str(error).splitlines() or [type(error).__name__])[0]
            raise ModelError(f"cannot read {file} ({first}); delete {file.parent} (a converted GGUF is made "
                             "again on the next load) or pass another model") from None
    return state


def load_causal_lm(folder: Path, dtype: torch.dtype) -> torch.nn.Module | None:
    """The causal LM in ``folder`` at ``dtype`` (sdpa attention, eval mode), its weights read as
    :func:`read_state_dict` does; None where this loader does not apply, for transformers to load
    from the folder: no safetensors weights, or an architecture that keeps some weights in float32
    (they would have been rounded to ``dtype`` on the way)."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    files = safetensors_files(folder)
    if files is None:
        return None
    config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    model_class = AutoModelForCausalLM._model_mapping.get(type(config), None)  # the Auto class wants a path
    if model_class is None or getattr(config, "quantization_config", None) is not None:
        return None  # quantized checkpoints (GPTQ's packed integers, ...) load through transformers' quantizer
    state = read_state_dict(files, dtype)
    model = model_class.from_pretrained(None, config=config, state_dict=state, dtype=dtype,
                                        attn_implementation="sdpa")
    del state
    if any(parameter.is_floating_point() and parameter.dtype != dtype for parameter in model.parameters()):
        return None
    model.config.name_or_path = str(folder)
    if (folder / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(str(folder), local_files_only=True)
    return model.eval()
