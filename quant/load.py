"""The second verb: load a quantized variant of MODEL for run time.

``load_quantized(source, "nf4" | "gptq")`` finds (or makes, once) the cached checkpoint of
:mod:`specplan.quant.checkpoint` and loads it through transformers, so that the result is an
ordinary causal LM (same cache API, masks and position ids as the 16-bit model) whose
Linear layers are bitsandbytes ``Linear4bit`` (NF4) or GPTQModel's ``TorchAtenLinear``
(GPTQ, torch's ``_weight_int4pack_mm_for_cpu`` kernel with bfloat16 activations).
"""

from __future__ import annotations

import warnings

import torch

from specplan.quant.checkpoint import QuantizedCheckpoint, quantize
from specplan.models.load import DTYPES, LoadedModel, load_model
from specplan.quant.methods import METHODS, method_of_label


def load_checkpoint(checkpoint: QuantizedCheckpoint, dtype: str, device: str) -> torch.nn.Module:
    """The causal LM of ``checkpoint`` in eval mode on ``device``."""
    from transformers import AutoModelForCausalLM

    if checkpoint.method.name == "nf4":
        from specplan.quant.nf4 import load_nf4

        return load_nf4(checkpoint.path, dtype, device)
    with warnings.catch_warnings():  # optimum's GPTQ loader calls a transformers 5 method deprecated for v6
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        model = AutoModelForCausalLM.from_pretrained(
            str(checkpoint.path), dtype=DTYPES[dtype], device_map=device, attn_implementation="sdpa",
            local_files_only=True,
        )
    return model.eval()


def load_quantized(source: str, method: str, dtype: str = "bfloat16", device: str = "cpu") -> LoadedModel:
    """MODEL ``source`` quantized with ``method`` (``nf4`` | ``gptq``), ready for inference.

    The first call for a (source weights, method) pair quantizes and caches the checkpoint
    (GPTQ: ~1-2 min for the default model on 2 cores; NF4: ~20 s); later calls load it.
    The returned fingerprint identifies the 16-bit source and the method (plan contracts
    compare it), and ``path`` is the quantized checkpoint's directory.
    Raises: BackendMissingError (the method's extra is not installed), ModelError (bad MODEL).
    """
    from transformers import AutoTokenizer

    checkpoint = quantize(source, method, dtype=dtype)
    model = load_checkpoint(checkpoint, dtype, device)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint.path), local_files_only=True)
    return LoadedModel(source, str(checkpoint.path), model, tokenizer, checkpoint.fingerprint, dtype)


def load_model_variant(source: str, dtype: str = "float32", device: str = "cpu", quant: str = "none") -> LoadedModel:
    """MODEL at precision ``quant``: a profile entry's quant field (``none``: the weights as they
    are; ``nf4`` or ``gptq-w4g64``: that 4-bit variant, quantized once into the cache if needed)
    or a ``--quant`` value (``nf4`` | ``gptq``)."""
    if quant in ("", "none"):
        return load_model(source, dtype, device)
    name = quant if quant in METHODS else method_of_label(quant).name
    return load_quantized(source, name, dtype, device)
