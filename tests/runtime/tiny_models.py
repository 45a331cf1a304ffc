"""A tiny random Llama for runtime tests (float32, built in milliseconds, no download)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

TINY_VOCAB = 96


def tiny_llama(attn_implementation: str = "eager", seed: int = 0) -> LlamaForCausalLM:
    """2 layers, hidden 32, 4 query heads over 2 KV heads (GQA), vocab 96, float32, eval mode."""
    config = LlamaConfig(
        vocab_size=TINY_VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    # Random init gives near-uniform logits; sharpen them so argmax and tree branches matter.
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)
    return model
