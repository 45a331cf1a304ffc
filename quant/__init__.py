"""Quantization backends (bitsandbytes NF4, GPTQ through GPTQModel) for 4-bit targets.

Two verbs, as in gpt-fast's quantize.py: :func:`specplan.quant.checkpoint.quantize` makes the
quantized checkpoint once (cached), :func:`specplan.quant.load.load_quantized` loads it for
run time. ``methods`` (names, labels; no torch), ``backends`` (optional imports, one-line
errors), ``calibration`` (Spec-Bench rows), ``gptq`` and ``nf4`` (the backends), ``variants``
(quant-aware profiles), ``quality`` (agreement with the 16-bit model, perplexity), ``command``
(``specplan quantize``). References: GPTQ, arXiv 2210.17323; QLoRA / NF4, arXiv 2305.14314.
"""
