"""Shared fixtures: tiny random Llama models (no download) and the real default model."""

from __future__ import annotations

import os

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def default_model_dir(tmp_path_factory) -> str:
    """The default model converted to safetensors (cached under $SPECPLAN_CACHE)."""
    from specplan.runtime.models import resolve_model_dir

    return resolve_model_dir("default")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, default_model_dir) -> str:
    """A tiny random Llama with the default model's tokenizer (vocab 49152), saved to disk."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(default_model_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(30.0)  # sharper logits: greedy choices are not near-ties
    path = tmp_path_factory.mktemp("tiny-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture
def one_thread():
    """One torch thread: on a shared 2-core machine two threads thrash (10x slower under load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
