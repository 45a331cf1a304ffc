"""A ``save_pretrained`` model folder (Llama or Qwen2) written as one GGUF file for llama.cpp.

llama.cpp's ``--spec-draft-model`` takes a GGUF file (docs/formats.md, "Drafters in the
engines' formats"); specplan's distilled drafters (``specplan distill --kind model``) are
Hugging Face folders. This writes the folder's weights unquantised (F32, the precision the
profile measured the drafter in) under llama.cpp's tensor names, the architecture's
hyper-parameters under its metadata keys, and the folder's byte-level BPE tokenizer.

Llama's query and key rows are reordered: Hugging Face rotates the two halves of each head
(``rotate_half``), llama.cpp's ``llama`` architecture rotates adjacent pairs, so row
``h * d + i`` (i < d/2) moves to ``h * d + 2 i`` and row ``h * d + d/2 + i`` to ``h * d + 2 i + 1``
(the same reordering llama.cpp's own converter applies). Qwen2 runs with llama.cpp's NeoX
rotation, which is Hugging Face's: no reordering.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from specplan.core.errors import ModelError
from specplan.core.files import write_file_atomic

ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2"}  # Hugging Face model_type -> GGUF architecture
LAYER_TENSORS = {  # Hugging Face name inside model.layers.N -> llama.cpp name inside blk.N
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED = 1, 3, 4  # llama.cpp token types


def _read_config(folder: Path) -> dict:
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as error:
        raise ModelError(f"{folder} has no readable config.json ({error}); pass a save_pretrained model folder") from None
    if config.get("model_type") not in ARCHITECTURES:
        raise ModelError(f"{folder} is a {config.get('model_type')!r} model; GGUF export writes "
                         f"{' and '.join(ARCHITECTURES)} drafters only")
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise ModelError(f"{folder} uses {rope.get('rope_type', rope.get('type'))!r} rope scaling; GGUF export "
                         "writes plain rope only")
    return config


def _rope_theta(config: dict) -> float:
    rope = config.get("rope_parameters") or {}
    return float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))


def read_weights(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor of the folder's ``*.safetensors`` files, as float32 numpy arrays."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelError(f"{folder} has no .safetensors weights; save the drafter with save_pretrained")
    weights = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():
                weights[name] = handle.get_tensor(name).float().numpy()
    return weights


def rotate_pairs(weight: np.ndarray, heads: int) -> np.ndarray:
    """Query/key rows from Hugging Face's half rotation to llama.cpp's adjacent-pair rotation."""
    rows = weight.shape[0]
    return (weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def gguf_tensors(weights: dict[str, np.ndarray], config: dict) -> dict[str, np.ndarray]:
    """llama.cpp's tensor names and layouts for the folder's weights."""
    llama = config["model_type"] == "llama"
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    tensors = {"token_embd.weight": weights["model.embed_tokens.weight"],
               "output_norm.weight": weights["model.norm.weight"]}
    if "lm_head.weight" in weights and not config.get("tie_word_embeddings", False):
        tensors["output.weight"] = weights["lm_head.weight"]
    for layer in range(config["num_hidden_layers"]):
        for hf_name, gguf_name in LAYER_TENSORS.items():
            for kind in ("weight", "bias"):
                value = weights.get(f"model.layers.{layer}.{hf_name}.{kind}")
                if value is None:
                    continue
                if llama and gguf_name in ("attn_q", "attn_k"):
                    value = rotate_pairs(value, heads if gguf_name == "attn_q" else kv_heads)
                tensors[f"blk.{layer}.{gguf_name}.{kind}"] = np.ascontiguousarray(value, dtype=np.float32)
    return tensors


def tokenizer_vocabulary(folder: Path) -> tuple[list[str], list[int], list[str]]:
    """(tokens by id, llama.cpp token types, merges) of the folder's byte-level BPE tokenizer.json."""
    try:
        document = json.loads((folder / "tokenizer.json").read_text())
    except (OSError, ValueError) as error:
        raise ModelError(f"{folder} has no readable tokenizer.json ({error}); save the tokenizer with the drafter") from None
    model = document.get("model", {})
    if model.get("type") != "BPE":
        raise ModelError(f"{folder}'s tokenizer is {model.get('type')!r}; GGUF export writes byte-level BPE tokenizers only")
    by_id = {index: (token, TOKEN_NORMAL) for token, index in model["vocab"].items()}
    for added in document.get("added_tokens", []):
        by_id[added["id"]] = (added["content"], TOKEN_CONTROL if added.get("special") else TOKEN_USER_DEFINED)
    size = max(by_id) + 1
    tokens = [by_id.get(index, (f"[PAD{index}]", TOKEN_USER_DEFINED)) for index in range(size)]
    merges = [pair if isinstance(pair, str) else " ".join(pair) for pair in model.get("merges", [])]
    return [token for token, _ in tokens], [kind for _, kind in tokens], merges


def _add_hyperparameters(writer, config: dict, name: str) -> None:
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    writer.add_name(name)
    writer.add_context_length(config.get("max_position_embeddings", 2048))
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads", heads))
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_vocab_size(config["vocab_size"])
    writer.add_file_type(0)  # all F32


def _add_tokenizer(writer, folder: Path, config: dict, pre: str) -> None:
    tokens, kinds, merges = tokenizer_vocabulary(folder)
    if len(tokens) > config["vocab_size"]:
        raise ModelError(f"{folder}'s tokenizer has {len(tokens)} tokens, its model {config['vocab_size']}")
    tokens += [f"[PAD{index}]" for index in range(len(tokens), config["vocab_size"])]
    kinds += [TOKEN_USER_DEFINED] * (config["vocab_size"] - len(kinds))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(kinds)
    writer.add_token_merges(merges)
    for key, add in (("bos_token_id", writer.add_bos_token_id), ("eos_token_id", writer.add_eos_token_id)):
        value = config.get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            add(int(value))
    writer.add_add_bos_token(False)


def write_gguf(folder: str | Path, output: str | Path, tokenizer_pre: str = "default") -> Path:
    """Write the model in ``folder`` to the GGUF file ``output`` (atomically); return ``output``.

    ``tokenizer_pre`` is llama.cpp's pre-tokenizer name (``tokenizer.ggml.pre``); the target's
    own GGUF names it (``smollm`` for the default model). A draft model's text is never
    tokenized by llama.cpp (it drafts on the target's token ids), so ``default`` only matters
    when the file is run on its own.
    """
    import gguf

    folder, output = Path(folder), Path(output)
    config = _read_config(folder)
    tensors = gguf_tensors(read_weights(folder), config)

    def write(path: Path) -> None:
        writer = gguf.GGUFWriter(str(path), ARCHITECTURES[config["model_type"]])
        _add_hyperparameters(writer, config, folder.name)
        _add_tokenizer(writer, folder, config, tokenizer_pre)
        for name, value in tensors.items():
            writer.add_tensor(name, value)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    write_file_atomic(output, write)
    return output


def gguf_string(path: str | Path, key: str) -> str | None:
    """The string metadata ``key`` of the GGUF file ``path`` (None when absent or unreadable)."""
    import gguf

    try:
        field = gguf.GGUFReader(str(path)).fields.get(key)
    except (OSError, ValueError):
        return None
    return None if field is None else str(field.contents())
