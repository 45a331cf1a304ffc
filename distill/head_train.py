"""A draft head's initialisation and training loss (EAGLE, arXiv 2401.15077; EAGLE-3, arXiv 2503.01840).

Head position i reads ``(f_i, token i+1)`` and is trained on two things: its feature
estimate against the target's ``f_{i+1}`` (smooth L1, as EAGLE regresses features) and its
token distribution against the target's at i+1 (the truncated KL and top-1 cross-entropy of
:mod:`.train`, over the head's kept vocabulary). A second pass feeds the head's own estimates
back as input features (the head's situation from the second draft token on: EAGLE-3's
training-time test, here with every position of the pass estimated), weighted
``feedback_weight``. The LM head rows (the target's) stay frozen; the embedding is the
target's and is not a parameter of the head.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from specplan.distill.config import TrainConfig
from specplan.distill.head_data import HeadSequence
from specplan.distill.train import top_k_kl
from specplan.runtime.drafters.head_model import DraftHead, head_config

FEATURE_WEIGHT = 1.0  # smooth-L1 feature regression beside the distribution loss
FEEDBACK_WEIGHT = 0.5  # the pass over the head's own estimates
OUTSIDE_LOGPROB = -20.0  # drafter log-probability given to a target candidate outside the kept vocabulary


def new_head(target: torch.nn.Module, vocab_ids: torch.Tensor, layout: str = "eagle1") -> torch.nn.Module:
    """A float32 head for ``target``: its decoder layer starts as a copy of the target's last one,
    its norm as the target's final norm, its LM head as the target's rows for ``vocab_ids``.
    ``layout`` ``eagle3``: EAGLE-3's layer (:mod:`specplan.runtime.drafters.head_eagle3`)."""
    config = head_config(target.config)
    if layout == "eagle3":
        return _new_eagle3_head(target, config, vocab_ids)
    head = DraftHead(config, vocab_ids)
    decoder = target.get_decoder()
    with torch.no_grad():
        _copy_layer(head.layer, decoder.layers[-1])
        head.norm.weight.copy_(decoder.norm.weight)
        head.lm_head.weight.copy_(target.get_output_embeddings().weight[vocab_ids])
        head.fuse.weight.mul_(0.5)
    head.share_embedding(target.get_input_embeddings())
    return head.float()


def _copy_layer(layer: torch.nn.Module, last: torch.nn.Module) -> None:
    """The head's decoder layer starts as the target's last one. A bias the target lacks (o_proj's,
    where the target's q, k and v have one: Qwen2) starts at zero, so the copy computes the same."""
    state = copy.deepcopy(last.state_dict())
    missing, unexpected = layer.load_state_dict(state, strict=False)
    if unexpected or any(not name.endswith(".bias") for name in missing):
        raise RuntimeError(f"the target's last layer does not fit the head's: missing {missing}, unexpected {unexpected}")
    for name in missing:
        layer.get_parameter(name).zero_()


def _new_eagle3_head(target: torch.nn.Module, config, vocab_ids: torch.Tensor) -> torch.nn.Module:
    """EAGLE-3's layer from the target's last: q/k/v read half the embedding, half the feature."""
    from specplan.runtime.drafters.head_eagle3 import Eagle3Head

    head = Eagle3Head(config, vocab_ids)
    last, decoder = target.get_decoder().layers[-1], target.get_decoder()
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj"):
            weight = getattr(last.self_attn, name).weight
            getattr(head.self_attn, name).weight.copy_(0.5 * torch.cat([weight, weight], dim=1))
        head.self_attn.o_proj.weight.copy_(last.self_attn.o_proj.weight)
        head.mlp.load_state_dict(last.mlp.state_dict())
        for norm in ("input_layernorm", "hidden_norm"):
            getattr(head, norm).weight.copy_(last.input_layernorm.weight)
        head.post_attention_layernorm.weight.copy_(last.post_attention_layernorm.weight)
        head.norm.weight.copy_(decoder.norm.weight)
        head.lm_head.weight.copy_(target.get_output_embeddings().weight[head.vocab_ids])
    head.share_embedding(target.get_input_embeddings())
    return head.float()


def freeze_head(head: DraftHead) -> list[torch.nn.Parameter]:
    """Train the fuse layer, the decoder layer and the norm; the LM head rows stay the target's."""
    head.lm_head.weight.requires_grad_(False)
    return [parameter for name, parameter in head.named_parameters() if not name.startswith("lm_head")]


def _distribution_loss(logits: torch.Tensor, top_indices: torch.Tensor, top_logprobs: torch.Tensor,
                       kept_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-position truncated KL and top-1 cross-entropy of kept-vocabulary ``logits`` [n, kept]
    against the target's top-k [n, k] (full-vocabulary ids; those outside the kept set get
    a fixed drafter log-probability: no gradient, the head cannot propose them)."""
    logq = torch.log_softmax(logits.float(), dim=-1)  # [n, kept]
    slots = kept_index[top_indices.long()]  # [n, k], -1 outside
    logq_top = logq.gather(-1, slots.clamp_min(0))
    logq_top = torch.where(slots >= 0, logq_top, torch.full_like(logq_top, OUTSIDE_LOGPROB))
    return top_k_kl(top_logprobs, logq_top), -logq_top[:, 0]


def head_sequence_loss(head: DraftHead, sequence: HeadSequence, config: TrainConfig) -> tuple[torch.Tensor, float, float]:
    """Weighted loss of one text (both passes); also its KL and cross-entropy parts (first pass)."""
    text, features = sequence.text, sequence.features
    length = len(text.token_ids)
    kept_index = torch.full((head.config.vocab_size,), -1, dtype=torch.long)
    kept_index[head.vocab_ids] = torch.arange(len(head.vocab_ids))
    ids = text.token_ids.long()
    weights = torch.ones(length - 2)  # head positions 0 .. length-3 (position i is trained on row i + 1)
    weights[: max(0, text.prompt_length - 2)] = config.prompt_weight
    logits, estimates = head.run(ids[None, 1:length - 1], features[None, : length - 2], use_cache=False)
    kl, cross_entropy = _distribution_loss(logits[0], text.top_indices[1:], text.top_logprobs[1:], kept_index)
    feature_weight = 0.0 if getattr(head, "layout", "") == "eagle3" else FEATURE_WEIGHT  # EAGLE-3 feeds back s, not f
    regression = F.smooth_l1_loss(estimates[0].float(), features[1 : length - 1], reduction="none").mean(-1)
    first = config.kl_weight * kl + config.cross_entropy_weight * cross_entropy + feature_weight * regression
    loss = (weights * first).sum() / weights.sum()
    if length > 3:  # second pass: position j >= 1 reads the first pass's estimate of f_j
        positions = torch.arange(1, length - 2)[None, :]
        logits2, estimates2 = head.run(ids[None, 2:length - 1], estimates[:, : length - 3], position_ids=positions, use_cache=False)
        kl2, cross_entropy2 = _distribution_loss(logits2[0], text.top_indices[2:], text.top_logprobs[2:], kept_index)
        regression2 = F.smooth_l1_loss(estimates2[0].float(), features[2 : length - 1], reduction="none").mean(-1)
        second = config.kl_weight * kl2 + config.cross_entropy_weight * cross_entropy2 + feature_weight * regression2
        loss = loss + FEEDBACK_WEIGHT * (weights[1:] * second).sum() / weights[1:].sum()
    normalised = weights / weights.sum()
    return loss, float((normalised * kl).detach().sum()), float((normalised * cross_entropy).detach().sum())
