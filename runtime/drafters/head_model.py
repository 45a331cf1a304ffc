"""An EAGLE-style draft head: one decoder layer over the target's features (arXiv 2401.15077).

At position i the head reads the target's feature ``f_i`` (its last hidden state after the
final norm, what its LM head reads; it predicts token i+1) and the embedding of token i+1,
fuses them with one linear layer (2 hidden -> hidden), runs one Llama decoder layer over its
own KV cache, and normalises: the result is its estimate of ``f_{i+1}``, and the LM head over
it predicts token i+2. Drafting further feeds that estimate back as the next input feature.

The token embedding is the target's own (shared at load time, never saved); the LM head is
the target's, cut to a drafter vocabulary (``vocab_ids``): the tokens that cover most of the
target's outputs ("Balancing Coverage and Draft Latency in Vocabulary Trimming for Faster
Speculative Decoding", arXiv 2603.05210), so the head's output layer costs a fraction of the
target's. Logits come back over the full vocabulary, with ``-inf`` outside the kept tokens,
so every drafter code path (argmax, top-k children, sampled draft rows) works unchanged and
a trimmed token simply has draft probability 0 (rejection sampling stays lossless).

Saved as ``head.safetensors`` + ``head.json`` (config, vocabulary size, ``layout``) in a
directory that ``--drafter head:DIR`` loads. ``layout: eagle3`` (absent: this module's EAGLE-1
layout) is a head in EAGLE-3's layout (:mod:`.head_eagle3`), which ``specplan export --engine
vllm|sglang`` writes as the engines' checkpoint; such a checkpoint also loads as ``head:DIR``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

from specplan.core.errors import DrafterSpecError
from specplan.core.files import read_json_object, write_text_atomic

HEAD_WEIGHTS = "head.safetensors"
HEAD_CONFIG = "head.json"
HEAD_FORMAT = 1
QKV_BIAS_TYPES = ("qwen2",)  # targets whose q, k and v projections carry a bias (Qwen2's attention)


@dataclass(frozen=True)
class HeadOutput:
    logits: torch.Tensor  # [1, n, vocab] float over the full vocabulary (-inf outside vocab_ids)
    features: torch.Tensor  # [1, n, hidden] estimated next features


def head_config(target_config) -> LlamaConfig:
    """A one-layer Llama config with the target's widths (the head's decoder layer)."""
    fields = target_config.to_dict()
    for key in ("architectures", "auto_map", "quantization_config"):
        fields.pop(key, None)
    if fields.get("model_type") in QKV_BIAS_TYPES:
        fields["attention_bias"] = True  # Llama's switch also gives o_proj a bias: zero at init (head_train)
    fields.update(num_hidden_layers=1, model_type="llama")
    if "layer_types" in fields:  # per-layer lists (Qwen2: one entry per target layer) describe the one head layer
        fields["layer_types"] = ["full_attention"]
    config = LlamaConfig(**fields)
    config._attn_implementation = "sdpa"
    return config


class HeadBase(nn.Module):
    """What every draft-head layout shares: the target's token embedding (shared, never trained
    or saved), the forward that wraps :meth:`run`, and logits scattered back to the full vocabulary.
    A layout defines ``norm`` (its last norm), ``config``, ``vocab_ids`` and ``run``."""

    @property
    def dtype(self) -> torch.dtype:
        return self.norm.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.norm.weight.device

    def share_embedding(self, embedding: nn.Embedding) -> None:
        """Use the target's token embedding (not a parameter of the head: never trained or saved)."""
        object.__setattr__(self, "embed_tokens", embedding)

    def forward(self, input_ids: torch.Tensor, features: torch.Tensor | None = None, past_key_values=None,
                attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                use_cache: bool = True, **_) -> HeadOutput:
        """``input_ids`` [1, n] tokens i+1, ``features`` [1, n, hidden] f_i (zeros when None: timing only)."""
        trimmed, fed_back = self.run(input_ids, features, past_key_values, attention_mask, position_ids, use_cache)
        return HeadOutput(self.full_logits(trimmed), fed_back)

    def _inputs(self, input_ids: torch.Tensor, features: torch.Tensor | None, past_key_values,
                attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None):
        """The embedded tokens [1, n, hidden], the features [1, n, hidden] (zeros when None), the
        attention mask and the position ids (causal after the cache when not given)."""
        if self.embed_tokens is None:
            raise RuntimeError(f"{type(self).__name__}.share_embedding(target embedding) must be called before a forward")
        embedded = self.embed_tokens(input_ids).to(self.dtype)  # [1, n, hidden]
        features = torch.zeros_like(embedded) if features is None else features.to(self.dtype)
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        count = input_ids.shape[1]
        if position_ids is None:
            position_ids = torch.arange(past, past + count, device=input_ids.device)[None, :]
        if attention_mask is None:
            attention_mask = causal_mask(past, count, self.dtype, input_ids.device)
        return embedded, features, attention_mask, position_ids

    def full_logits(self, trimmed: torch.Tensor) -> torch.Tensor:
        """Logits over the kept tokens [..., kept] scattered into the full vocabulary [..., vocab]."""
        if len(self.vocab_ids) == self.config.vocab_size:
            return trimmed
        full = torch.full((*trimmed.shape[:-1], self.config.vocab_size), float("-inf"), dtype=trimmed.dtype,
                          device=trimmed.device)
        return full.index_copy_(-1, self.vocab_ids, trimmed)


class DraftHead(HeadBase):
    """The head's trainable parts plus a reference to the target's token embedding."""

    def __init__(self, config: LlamaConfig, vocab_ids: torch.Tensor):
        super().__init__()
        hidden = config.hidden_size
        self.config = config
        self.fuse = nn.Linear(2 * hidden, hidden, bias=True)
        self.layer = LlamaDecoderLayer(config, layer_idx=0)
        self.rotary = LlamaRotaryEmbedding(config)
        self.norm = LlamaRMSNorm(hidden, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, len(vocab_ids), bias=False)
        self.register_buffer("vocab_ids", vocab_ids.long().clone(), persistent=True)
        self.embed_tokens: nn.Embedding | None = None  # the target's, set by share_embedding

    def run(self, input_ids: torch.Tensor, features: torch.Tensor | None = None, past_key_values=None,
            attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
            use_cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits over the kept vocabulary [1, n, kept] and the feature estimates [1, n, hidden]."""
        embedded, features, attention_mask, position_ids = self._inputs(
            input_ids, features, past_key_values, attention_mask, position_ids)
        hidden = self.fuse(torch.cat([features, embedded], dim=-1))  # [1, n, hidden]
        hidden = self.layer(hidden, attention_mask=attention_mask, position_ids=position_ids,
                            past_key_values=past_key_values, use_cache=use_cache,
                            position_embeddings=self.rotary(hidden, position_ids))
        estimate = self.norm(hidden)  # [1, n, hidden]
        return self.lm_head(estimate), estimate

def is_draft_head(network: nn.Module) -> bool:
    """Whether ``network`` is a draft head of either layout (read features; timed after a target step)."""
    return isinstance(network, HeadBase)


def causal_mask(past: int, count: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Additive mask [1, 1, count, past + count]: row i sees the cache and new tokens 0..i."""
    allowed = torch.ones(count, past + count, dtype=torch.bool, device=device).tril(diagonal=past)
    mask = torch.zeros(count, past + count, dtype=dtype, device=device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min).view(1, 1, count, past + count)


def save_head(head: DraftHead, directory: Path, manifest: dict) -> None:
    """``head.safetensors`` (fuse, layer, norm, trimmed LM head, vocab ids) and ``head.json``."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    state = {key: value.detach().contiguous().cpu() for key, value in head.state_dict().items()}
    save_file(state, str(directory / HEAD_WEIGHTS))
    document = {"format": HEAD_FORMAT, "config": head.config.to_dict(), "kept_vocabulary": len(head.vocab_ids),
                "layout": getattr(head, "layout", "eagle1"), **manifest}
    write_text_atomic(directory / HEAD_CONFIG, json.dumps(document, indent=1, sort_keys=True))


def head_of_layout(document: dict, config: LlamaConfig, vocab_ids: torch.Tensor, directory: Path) -> nn.Module:
    """An untrained head of the layout ``head.json`` names (absent: EAGLE-1's, :class:`DraftHead`)."""
    layout = document.get("layout", "eagle1")
    if layout == "eagle1":
        return DraftHead(config, vocab_ids)
    if layout == "eagle3":
        from specplan.runtime.drafters.head_eagle3 import Eagle3Head

        return Eagle3Head(config, vocab_ids)
    raise DrafterSpecError(f"{directory / HEAD_CONFIG} has layout {layout!r}; this version reads eagle1 and eagle3")


def read_head(directory: str | Path) -> nn.Module:
    """The head saved in ``directory`` without a target (no embedding shared: for export only)."""
    from safetensors.torch import load_file

    directory = Path(directory)
    document = read_json_object(directory / HEAD_CONFIG, f"re-run `specplan distill --kind head -o {directory}`",
                                DrafterSpecError)
    config = head_config(LlamaConfig(**document.get("config", {})))
    state = load_file(str(directory / HEAD_WEIGHTS))
    head = head_of_layout(document, config, state["vocab_ids"], directory)
    head.load_state_dict(state)
    return head.eval()


def load_head(directory: str | Path, target: nn.Module, dtype: torch.dtype, device) -> DraftHead:
    """The head saved in ``directory``, sharing ``target``'s embedding; one-line errors on mismatch."""
    from safetensors.torch import load_file

    directory = Path(directory)
    from specplan.runtime.drafters.head_eagle3 import is_eagle3_checkpoint, load_eagle3

    if is_eagle3_checkpoint(directory) and not (directory / HEAD_CONFIG).is_file():
        return load_eagle3(directory, target, dtype, device)
    if not (directory / HEAD_CONFIG).is_file() or not (directory / HEAD_WEIGHTS).is_file():
        raise DrafterSpecError(f"{directory} holds no draft head ({HEAD_CONFIG} + {HEAD_WEIGHTS}); "
                               f"make one with `specplan distill TARGET --kind head -o {directory}`")
    document = read_json_object(directory / HEAD_CONFIG, f"re-run `specplan distill --kind head -o {directory}`",
                                DrafterSpecError)
    if document.get("format") != HEAD_FORMAT:
        raise DrafterSpecError(f"{directory / HEAD_CONFIG} has format {document.get('format')!r}, this version reads "
                               f"{HEAD_FORMAT}; re-run `specplan distill --kind head`")
    if not isinstance(document.get("config"), dict):
        raise DrafterSpecError(f"{directory / HEAD_CONFIG} has no `config` mapping; re-run `specplan distill --kind head`")
    config = head_config(LlamaConfig(**document["config"]))
    target_config = target.config
    for field in ("hidden_size", "vocab_size"):
        if getattr(config, field) != getattr(target_config, field):
            raise DrafterSpecError(f"draft head {directory} was trained for {field} {getattr(config, field)}, the target "
                                   f"has {getattr(target_config, field)}; distill a head for this target")
    state = load_file(str(directory / HEAD_WEIGHTS))
    head = head_of_layout(document, config, state["vocab_ids"], directory)
    head.load_state_dict(state)
    head.share_embedding(target.get_input_embeddings())
    return head.to(device=device, dtype=dtype).eval()
