"""A tiny random Llama checkpoint with the default model's tokenizer (vocab 49152), for
tests that load models through the CLI or the loaders (no download)."""

from __future__ import annotations

import torch


def save_tiny_llama(path, tokenizer_dir: str, hidden_size: int) -> str:
    """Build a 4-layer random Llama of ``hidden_size`` (GQA 4/2 heads), save it with the
    tokenizer of ``tokenizer_dir`` into ``path``, return ``str(path)``."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=2048, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(30.0)  # sharper logits: greedy choices are not near-ties
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
