"""4-bit models with random weights, for latency-only profiles (docs/guide.md, "Latency-only
profiles and the GPU check"): a 4-bit kernel's cost depends on the shapes and the packing, not
on the values, so T(n) of an NF4 or GPTQ target can be measured before its weights exist.

- NF4: the random 16-bit model is saved and loaded back through bitsandbytes, which
  quantizes at load (:func:`specplan.quant.nf4.load_nf4`), as for a real checkpoint.
- GPTQ: no calibration can run on random weights, so the checkpoint is written directly in
  GPTQ's packed format (the one GPTQModel writes, ``checkpoint_format: gptq``): per decoder
  Linear of ``in`` inputs and ``out`` outputs, ``qweight`` int32 [in / 8, out] (eight 4-bit
  values per int32, random), ``qzeros`` int32 [in / group, out / 8] (symmetric: every zero
  point 8, stored minus one as GPTQ v1 does), ``scales`` float16 [in / group, out] and
  ``g_idx`` int32 [in] (group of each input, no act-order), then loaded through transformers
  exactly as a quantized checkpoint is (GPTQ: Frantar et al., arXiv 2210.17323).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from specplan.quant.methods import GPTQ, NF4, pick_group_size

# the decoder's Linear layers that GPTQ packs (attention and MLP projections; the head stays 16-bit)
PACKED = re.compile(r"^model\.layers\.\d+\.(self_attn|mlp)\.\w+_proj\.weight$")
SYMMETRIC_ZEROS = 0x77777777  # eight 4-bit zero points of 8, each stored as 8 - 1 (GPTQ v1)


def random_4bit(model: torch.nn.Module, method: str, folder: Path, dtype: str, device: str) -> torch.nn.Module:
    """``model`` (random 16-bit weights) as a 4-bit model of ``method`` (nf4 | gptq), through a
    checkpoint written into ``folder``."""
    folder = Path(folder)
    if method == NF4.name:
        from specplan.quant.nf4 import load_nf4

        model.save_pretrained(str(folder))
        return load_nf4(folder, dtype, device)
    if method == GPTQ.name:
        return _load_gptq(write_random_gptq(model, folder), dtype, device)
    raise ValueError(f"no random-weight form for {method!r}; use nf4 or gptq")


def write_random_gptq(model: torch.nn.Module, folder: Path, bits: int = 4) -> Path:
    """A GPTQ checkpoint of ``model``'s shapes with random packed weights; the folder."""
    from safetensors.torch import save_file

    state = {name: tensor.detach().to("cpu") for name, tensor in model.state_dict().items()}
    widths = sorted({tensor.shape[1] for name, tensor in state.items() if PACKED.match(name)})
    group = pick_group_size(widths)
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for name, tensor in state.items():
        if PACKED.match(name):
            tensors.update(_packed(name.removesuffix(".weight"), tensor.shape, group, bits, generator))
        elif not (name == "lm_head.weight" and model.config.tie_word_embeddings):
            tensors[name] = tensor.contiguous()
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    quantization = {"bits": bits, "group_size": group, "desc_act": False, "sym": True, "lm_head": False,
                    "quant_method": "gptq", "checkpoint_format": "gptq", "format": "gptq", "pack_dtype": "int32"}
    config = model.config.to_dict()
    config["quantization_config"] = quantization
    (folder / "config.json").write_text(json.dumps(config, indent=1, default=str))
    (folder / "quantize_config.json").write_text(json.dumps(quantization, indent=1))
    return folder


def _packed(prefix: str, shape: torch.Size, group: int, bits: int, generator: torch.Generator) -> dict:
    """qweight, qzeros, scales and g_idx of one Linear of weight ``shape`` [out, in]."""
    out_features, in_features = shape
    per_word = 32 // bits
    groups = in_features // group
    qweight = torch.randint(-(2**31), 2**31 - 1, (in_features // per_word, out_features), dtype=torch.int32,
                            generator=generator)
    qzeros = torch.full((groups, out_features // per_word), SYMMETRIC_ZEROS, dtype=torch.int32)
    scales = (torch.rand((groups, out_features), generator=generator) * 0.01 + 0.001).to(torch.float16)
    g_idx = (torch.arange(in_features, dtype=torch.int32) // group).to(torch.int32)
    return {f"{prefix}.qweight": qweight, f"{prefix}.qzeros": qzeros, f"{prefix}.scales": scales,
            f"{prefix}.g_idx": g_idx}


def _load_gptq(folder: Path, dtype: str, device: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    from specplan.models.load import DTYPES

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=DTYPES[dtype], device_map=device,
                                                 attn_implementation="sdpa", local_files_only=True)
    return model.eval()


def random_label(config: dict, method: str) -> str:
    """The profile's ``quant`` field of a random model of ``config`` packed by :func:`random_4bit`
    (``nf4``, ``gptq-w4g128``: the group size :func:`write_random_gptq` picks for its widths)."""
    if method != GPTQ.name:
        return NF4.label
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    widths = [int(config["hidden_size"]), int(config["intermediate_size"]), heads * head_dim]
    return f"gptq-w{GPTQ.bits}g{pick_group_size(widths)}"
