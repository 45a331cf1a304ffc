"""A draft head in EAGLE-3's layout (arXiv 2503.01840), which vLLM and SGLang load as a checkpoint.

specplan's own head (:mod:`.head_model`, EAGLE-1's layout) fuses ``[f_i, embed]`` with one
linear layer and runs a plain decoder layer over the result; vLLM's and SGLang's EAGLE-3
draft layer instead normalises the two inputs apart and feeds their concatenation to the
attention projections, with the feature as the residual:

    e = input_layernorm(embed(token i+1)),  h = hidden_norm(f_i)
    a = f_i + o_proj(attention(q/k/v_proj([e, h])))            (q/k/v take 2 x hidden)
    s = a + mlp(post_attention_layernorm(a))
    logits = lm_head(norm(s))   over the draft vocabulary;     the next input feature is s

Neither layout can be rewritten as the other (the residual is ``f_i`` here and
``W [f_i, embed] + b`` in EAGLE-1's), so a head meant for the engines is trained in this
layout (``specplan distill --kind head --layout eagle3``). It reads the target's final
feature (after its last norm) as specplan's head does, which the engines do for a checkpoint
whose ``eagle_config.use_aux_hidden_state`` is false (no ``fc`` over three target layers); it
feeds back ``s`` (before the final norm), as the engines do. A trimmed vocabulary is the
draft-to-target map ``d2t`` (``target id = draft id + d2t[draft id]``) and the mask ``t2d``.

Checkpoint (``config.json`` + ``model.safetensors``): tensor names ``midlayer.*``, ``norm.weight``,
``lm_head.weight``, ``d2t``, ``t2d``; no ``embed_tokens`` (the engines share the target's).
Names and config keys: docs/formats.md, "Drafters in the engines' formats".
"""

from __future__ import annotations

import copy

import json
from pathlib import Path

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from specplan.core.errors import DrafterSpecError
from specplan.core.files import write_file_atomic, write_text_atomic
from specplan.runtime.drafters.head_model import HeadBase

EAGLE3_ARCHITECTURE = "LlamaForCausalLMEagle3"  # the class name vLLM's and SGLang's registries map
EAGLE3_WEIGHTS = "model.safetensors"
EAGLE3_CONFIG = "config.json"


class Eagle3Head(HeadBase):
    """EAGLE-3's one draft layer over the target's final feature; same calls as ``DraftHead``."""

    layout = "eagle3"

    def __init__(self, config: LlamaConfig, vocab_ids: torch.Tensor):
        super().__init__()
        hidden = config.hidden_size
        config = copy.copy(config)
        config.attention_bias = False  # EAGLE-3's layer has no biases (a Qwen2 target's q/k/v biases are dropped)
        self.config = config
        self.input_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.self_attn = LlamaAttention(config, layer_idx=0)
        head_dim = self.self_attn.head_dim
        for name, heads in (("q_proj", config.num_attention_heads), ("k_proj", config.num_key_value_heads),
                            ("v_proj", config.num_key_value_heads)):
            setattr(self.self_attn, name, nn.Linear(2 * hidden, heads * head_dim, bias=False))
        self.post_attention_layernorm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.mlp = LlamaMLP(config)
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.rotary = LlamaRotaryEmbedding(config)
        self.lm_head = nn.Linear(hidden, len(vocab_ids), bias=False)
        self.register_buffer("vocab_ids", vocab_ids.long().sort().values.clone(), persistent=True)
        self.embed_tokens: nn.Embedding | None = None

    def run(self, input_ids: torch.Tensor, features: torch.Tensor | None = None, past_key_values=None,
            attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
            use_cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits over the kept vocabulary [1, n, kept] and the next input features ``s`` [1, n, hidden]."""
        embedded, features, attention_mask, position_ids = self._inputs(
            input_ids, features, past_key_values, attention_mask, position_ids)
        joined = torch.cat([self.input_layernorm(embedded), self.hidden_norm(features)], dim=-1)  # [1, n, 2 hidden]
        attended, _ = self.self_attn(joined, position_embeddings=self.rotary(embedded, position_ids),
                                     attention_mask=attention_mask, past_key_values=past_key_values,
                                     use_cache=use_cache)
        summed = features + attended
        summed = summed + self.mlp(self.post_attention_layernorm(summed))  # [1, n, hidden], fed back
        return self.lm_head(self.norm(summed)), summed


WEIGHT_NAMES = {  # the head's state-dict name -> the checkpoint's name
    "input_layernorm.weight": "midlayer.input_layernorm.weight",
    "hidden_norm.weight": "midlayer.hidden_norm.weight",
    "post_attention_layernorm.weight": "midlayer.post_attention_layernorm.weight",
    **{f"self_attn.{name}.weight": f"midlayer.self_attn.{name}.weight" for name in ("q_proj", "k_proj", "v_proj", "o_proj")},
    **{f"mlp.{name}.weight": f"midlayer.mlp.{name}.weight" for name in ("gate_proj", "up_proj", "down_proj")},
    "norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
}


def eagle3_config(head: Eagle3Head) -> dict:
    """The checkpoint's config.json: a one-layer Llama config and the EAGLE-3 keys the engines read."""
    config = head.config
    return {
        "architectures": [EAGLE3_ARCHITECTURE], "model_type": "llama", "num_hidden_layers": 1,
        "hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
        "num_attention_heads": config.num_attention_heads, "num_key_value_heads": config.num_key_value_heads,
        "head_dim": head.self_attn.head_dim, "hidden_act": config.hidden_act, "rms_norm_eps": config.rms_norm_eps,
        "max_position_embeddings": config.max_position_embeddings,
        "rope_theta": float(config.rope_parameters["rope_theta"]),
        "rope_parameters": {"rope_type": "default", "rope_theta": float(config.rope_parameters["rope_theta"])},
        "vocab_size": config.vocab_size, "draft_vocab_size": len(head.vocab_ids), "target_hidden_size": config.hidden_size,
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False, "norm_before_residual": False,
        "eagle_config": {"use_aux_hidden_state": False},
        "bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id, "torch_dtype": "float32",
    }


def checkpoint_tensors(head: Eagle3Head) -> dict[str, torch.Tensor]:
    """The checkpoint's tensors: the layer under ``midlayer.``, ``d2t`` / ``t2d`` when trimmed."""
    state = head.state_dict()
    tensors = {stored: state[name].detach().float().contiguous().cpu() for name, stored in WEIGHT_NAMES.items()}
    vocab_ids = head.vocab_ids.cpu()
    if len(vocab_ids) != head.config.vocab_size:
        tensors["d2t"] = (vocab_ids - torch.arange(len(vocab_ids))).long()  # target id = draft id + d2t[draft id]
        t2d = torch.zeros(head.config.vocab_size, dtype=torch.bool)
        t2d[vocab_ids] = True
        tensors["t2d"] = t2d
    return tensors


def write_eagle3(head: Eagle3Head, directory: str | Path) -> Path:
    """Write ``config.json`` and ``model.safetensors`` into ``directory``; return it."""
    from safetensors.torch import save_file

    directory = Path(directory)
    tensors = checkpoint_tensors(head)
    write_file_atomic(directory / EAGLE3_WEIGHTS, lambda path: save_file(tensors, str(path), metadata={"format": "pt"}))
    write_text_atomic(directory / EAGLE3_CONFIG, json.dumps(eagle3_config(head), indent=1, sort_keys=True))
    return directory


def is_eagle3_checkpoint(directory: str | Path) -> bool:
    """Whether ``directory`` holds an EAGLE-3 checkpoint (config.json naming the EAGLE-3 class)."""
    try:
        config = json.loads((Path(directory) / EAGLE3_CONFIG).read_text())
    except (OSError, ValueError):
        return False
    return EAGLE3_ARCHITECTURE in (config.get("architectures") or [])


def load_eagle3(directory: str | Path, target: nn.Module, dtype: torch.dtype, device) -> Eagle3Head:
    """The EAGLE-3 checkpoint in ``directory`` as a head sharing ``target``'s embedding."""
    from safetensors.torch import load_file

    directory = Path(directory)
    if not is_eagle3_checkpoint(directory) or not (directory / EAGLE3_WEIGHTS).is_file():
        raise DrafterSpecError(f"{directory} holds no EAGLE-3 checkpoint ({EAGLE3_CONFIG} naming "
                               f"{EAGLE3_ARCHITECTURE} + {EAGLE3_WEIGHTS}); write one with `specplan export --engine vllm`")
    document = json.loads((directory / EAGLE3_CONFIG).read_text())
    if document.get("eagle_config", {}).get("use_aux_hidden_state", True):
        raise DrafterSpecError(f"{directory} drafts from three target layers (use_aux_hidden_state); specplan's heads "
                               "read the target's final feature only")
    fields = {key: value for key, value in document.items() if key not in ("architectures", "eagle_config")}
    config = LlamaConfig(**fields)
    for field in ("hidden_size", "vocab_size"):
        if getattr(config, field) != getattr(target.config, field):
            raise DrafterSpecError(f"EAGLE-3 head {directory} has {field} {getattr(config, field)}, the target "
                                   f"{getattr(target.config, field)}; export a head of this target")
    config._attn_implementation = "sdpa"
    tensors = load_file(str(directory / EAGLE3_WEIGHTS))
    if "d2t" in tensors:
        vocab_ids = tensors["d2t"].long() + torch.arange(len(tensors["d2t"]))
    else:
        vocab_ids = torch.arange(config.vocab_size)
    head = Eagle3Head(config, vocab_ids)
    state = {name: tensors[stored] for name, stored in WEIGHT_NAMES.items()}
    head.load_state_dict({**state, "vocab_ids": head.vocab_ids})
    head.share_embedding(target.get_input_embeddings())
    return head.to(device=device, dtype=dtype).eval()
