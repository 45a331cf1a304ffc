"""GPTQ through GPTQModel: 4-bit weights, one scale and zero point per group of input columns.

GPTQ (Frantar et al., arXiv 2210.17323, Algorithm 1) quantizes a layer's weight W column by
column in a fixed order; after rounding column q it spreads the rounding error over the
columns not yet quantized, weighted by the inverse Hessian H^-1 of H = 2 X X^T (X: the
layer's calibration inputs), layer by layer with the already-quantized layers' outputs as
the next one's inputs. GPTQModel (ModelCloud) is the maintained implementation; AutoGPTQ is
archived and does not run with transformers 5. GPTQModel 7.6.0 is the last release that
works with torch 2.13; it writes the AutoGPTQ checkpoint format that transformers loads
(through ``optimum``) into GPTQModel's kernels, on CPU its ``TorchAtenLinear``.
"""

from __future__ import annotations

from pathlib import Path

from specplan.quant.calibration import calibration_prompts, calibration_rows
from specplan.quant.methods import QuantMethod


def quantize_gptq(source_dir: str, output: Path, method: QuantMethod, calibration_limit: int | None = None) -> int:
    """Quantize the 16-bit model in ``source_dir`` with GPTQ and save it to ``output``.

    Returns the number of calibration prompts used. GPTQModel shows its own per-layer
    progress bar. Symmetric, no activation reordering (``desc_act=False``), so that the CPU
    int4 kernel applies; ``lm_head`` and embeddings stay 16-bit.
    """
    from gptqmodel import GPTQModel, QuantizeConfig
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source_dir, local_files_only=True)
    prompts = calibration_prompts(calibration_limit)
    rows = calibration_rows(tokenizer, prompts)
    tokens = sum(len(row["input_ids"]) for row in rows)
    print(f"specplan: GPTQ {method.label} of {source_dir} on {len(prompts)} Spec-Bench calibration prompts "
          f"({tokens} tokens in {len(rows)} rows); ~1-2 min for the default model on 2 cores, cached afterwards",
          flush=True)
    config = QuantizeConfig(bits=method.bits, group_size=method.group_size, desc_act=False, sym=True)
    model = GPTQModel.load(source_dir, config, device="cpu")
    model.quantize(rows, batch_size=1, tokenizer=tokenizer)
    model.save(str(output))
    tokenizer.save_pretrained(str(output))
    return len(prompts)
