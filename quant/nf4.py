"""NF4 through bitsandbytes: quantize at load time with transformers' BitsAndBytesConfig.

NF4 (QLoRA, Dettmers et al., arXiv 2305.14314, section 3) stores each weight as one of 16
levels placed at the quantiles of a standard normal, scaled by the absmax of its block of
64 weights; the matmul dequantizes to the compute dtype. bitsandbytes >= 0.48 has a CPU
backend (0.50.2 prints a harmless warning that the optional ``kernels`` package is absent
and falls back to its own dequantize-then-matmul path).
"""

from __future__ import annotations

from pathlib import Path

import torch

from specplan.models.load import DTYPES


def nf4_config(dtype: str):
    """BitsAndBytesConfig for NF4 weights with ``dtype`` compute (double quantization off:
    the absmax scales stay float, which costs 0.5 bit/weight and keeps dequantization simple)."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_compute_dtype=DTYPES[dtype], bnb_4bit_use_double_quant=False)


def load_nf4(model_dir: str | Path, dtype: str, device: str) -> torch.nn.Module:
    """The model in ``model_dir`` with every decoder Linear as an NF4 ``Linear4bit``.

    ``model_dir`` is either a 16-bit checkpoint (quantized now, ~20 s for the default model
    on 2 cores) or one written by :func:`save_nf4` (whose config already says NF4).
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    stored = getattr(AutoConfig.from_pretrained(str(model_dir), local_files_only=True), "quantization_config", None)
    extra = {} if stored else {"quantization_config": nf4_config(dtype)}
    model = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=DTYPES[dtype], device_map=device, attn_implementation="sdpa", local_files_only=True,
        **extra,
    )
    set_compute_dtype(model, DTYPES[dtype])
    return model.eval()


def set_compute_dtype(model: torch.nn.Module, dtype: torch.dtype) -> int:
    """Make every bitsandbytes ``Linear4bit`` compute in ``dtype``; return how many there are."""
    from bitsandbytes.nn import Linear4bit

    layers = [module for module in model.modules() if isinstance(module, Linear4bit)]
    for layer in layers:
        layer.compute_dtype = dtype
    return len(layers)


def save_nf4(source_dir: str | Path, output: Path, dtype: str) -> None:
    """Quantize ``source_dir`` to NF4 and save the 4-bit checkpoint (weights, quant state, tokenizer)."""
    from transformers import AutoTokenizer

    print(f"specplan: quantizing {source_dir} to NF4 with bitsandbytes", flush=True)
    model = load_nf4(source_dir, dtype, "cpu")
    model.save_pretrained(str(output))
    AutoTokenizer.from_pretrained(str(source_dir)).save_pretrained(str(output))
