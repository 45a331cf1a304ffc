"""A distilled model drafter written as GGUF (models/gguf_write.py) loads back and drafts like
its folder: the gguf reader gives back the tensors, llama-cpp-python (llama.cpp itself) gives
the folder's logits on tiny random Llama and Qwen2 models, and on a drafter as
``specplan distill`` starts it (the default model's first 4 layers) the folder's greedy tokens,
also through transformers' GGUF loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from specplan.core.errors import ModelError
from specplan.models.gguf_write import _read_config, gguf_tensors, read_weights, rotate_pairs, write_gguf

PROMPTS = ([1, 504, 3158, 282, 260, 3714], [2, 77, 19, 4096, 12, 9, 4461], [1, 30, 31, 32, 1001])
NEW_TOKENS = 8


def hf_model(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()


def greedy(model, prompt: list[int]) -> list[int]:
    with torch.no_grad():
        output = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                                do_sample=False)
    return output[0, len(prompt):].tolist()


def llama_cpp_model(path: Path, **options):
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=str(path), n_ctx=128, n_threads=1, verbose=False, **options)


def tiny_random(tmp_path: Path, tokenizer_dir: str, kind: str) -> Path:
    """A 2-layer random model of ``kind`` (GQA 4/2 heads, head size 8) with the default tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config_class, model_class = (LlamaConfig, LlamaForCausalLM) if kind == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    config = config_class(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                          tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(1)
    model = model_class(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1 and parameter.shape[0] != 32:  # Qwen2's q/k/v biases: not zero
                parameter.normal_(0, 0.5)
    model.save_pretrained(tmp_path / kind)
    tokenizer.save_pretrained(tmp_path / kind)
    return tmp_path / kind


@pytest.fixture(scope="module")
def started_drafter(default_model_dir, tmp_path_factory) -> Path:
    """What `specplan distill --kind model --layers 4` trains from: the target's first 4 layers."""
    from transformers import AutoTokenizer

    from specplan.distill.init import build_drafter

    folder = tmp_path_factory.mktemp("drafter") / "model"
    drafter = build_drafter(hf_model(default_model_dir), (0, 1, 2, 3))
    drafter.save_pretrained(folder)
    AutoTokenizer.from_pretrained(default_model_dir).save_pretrained(folder)
    return folder


def test_pair_rotation_moves_halves_to_adjacent_rows():
    weight = np.arange(8, dtype=np.float32)[:, None]  # 2 heads of 4 rows
    assert rotate_pairs(weight, 2)[:, 0].tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_llama_cpp_gives_the_folder_logits(kind, tmp_path, default_model_dir):
    import gguf

    folder = tiny_random(tmp_path, default_model_dir, kind)
    written = write_gguf(folder, tmp_path / f"{kind}.gguf")
    reader = gguf.GGUFReader(str(written))
    assert str(reader.fields["general.architecture"].contents()) == kind
    expected = gguf_tensors(read_weights(folder), _read_config(folder))
    stored = {tensor.name: np.asarray(tensor.data) for tensor in reader.tensors}
    assert set(stored) == set(expected)
    assert all(np.array_equal(stored[name].reshape(value.shape), value) for name, value in expected.items())
    model, llm = hf_model(folder), llama_cpp_model(written, logits_all=True)
    for prompt in PROMPTS:
        with torch.no_grad():
            reference = model(torch.tensor([prompt])).logits[0].numpy()
        llm.reset()
        llm.eval(prompt)
        assert np.allclose(np.asarray(llm.scores[:len(prompt)]), reference, atol=2e-3, rtol=1e-3)


def test_a_started_drafter_drafts_the_same_greedy_tokens(started_drafter, tmp_path):
    from transformers import AutoModelForCausalLM

    written = write_gguf(started_drafter, tmp_path / "drafter.gguf", tokenizer_pre="smollm")
    model = hf_model(started_drafter)
    expected = [greedy(model, prompt) for prompt in PROMPTS]
    assert len({tuple(tokens) for tokens in expected}) == len(PROMPTS)  # not a degenerate model
    loaded = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=written.name, dtype=torch.float32).eval()
    assert [greedy(loaded, prompt) for prompt in PROMPTS] == expected
    llm = llama_cpp_model(written)
    drafted = []
    for prompt in PROMPTS:
        tokens = []
        for token in llm.generate(prompt, top_k=1, temp=0.0, reset=True):
            tokens.append(token)
            if len(tokens) == NEW_TOKENS:
                break
        drafted.append(tokens)
    assert drafted == expected


def test_a_folder_that_is_not_a_model_is_a_one_line_error(tmp_path):
    with pytest.raises(ModelError, match="config.json"):
        write_gguf(tmp_path, tmp_path / "x.gguf")
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(ModelError, match="llama and qwen2"):
        write_gguf(tmp_path, tmp_path / "x.gguf")
