"""Quantization backends (bitsandbytes NF4, GPTQ through GPTQModel) for 4-bit targets."""
