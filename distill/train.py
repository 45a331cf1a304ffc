"""Training loop: truncated KL(target || drafter) plus cross-entropy on the target's top-1.

Loss at position t (FastDraft, arXiv 2411.11055: knowledge distillation on target-generated
text; EAGLE, arXiv 2401.15077, likewise regresses on the target's outputs):
``kl_weight * sum_{i in top-k} p_i (log p_i - log q_i) + cross_entropy_weight * (-log q_{top-1})``,
p the target's full-vocabulary probabilities restricted to its top k, q the drafter's. The
top-1 term aims at what speculative decoding accepts at temperature 0 (the target's argmax).
Prompt positions weigh ``prompt_weight``, continuation positions 1.

Deterministic: the data order of epoch e is a permutation drawn from ``seed`` and e, so
step s always sees the same sequences; a checkpoint (trainable weights, AdamW state, step,
loss history) every ``checkpoint_every`` steps lets a rerun continue exactly where it stopped.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from specplan.core.files import write_file_atomic
from specplan.core.errors import SpecplanError
from specplan.distill.config import TrainConfig
from specplan.distill.data import TrainingSequence
from specplan.distill.init import freeze_shared


@dataclass(frozen=True)
class TrainResult:
    step: int  # optimizer steps done in total (resumed ones included)
    seconds: float  # training wall time in total (resumed runs included)
    losses: tuple[tuple[int, float, float, float], ...]  # (step, loss, kl, cross-entropy), one per step
    stopped_by: str  # steps | budget


def learning_rate_at(step: int, config: TrainConfig) -> float:
    """Linear warmup, then cosine decay to ``min_learning_rate_fraction`` of the peak at ``steps``."""
    if step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    progress = min(1.0, (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps))
    floor = config.min_learning_rate_fraction
    return config.learning_rate * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def batch_indices(step: int, count: int, config: TrainConfig) -> list[int]:
    """Sequence indices of optimizer step ``step``: consecutive slots of seeded per-epoch permutations."""
    indices = []
    for slot in range(step * config.batch_sequences, (step + 1) * config.batch_sequences):
        epoch, position = divmod(slot, count)
        order = torch.randperm(count, generator=torch.Generator().manual_seed(config.seed * 100_003 + epoch))
        indices.append(int(order[position]))
    return indices


def top_k_kl(logp_top: torch.Tensor, logq_top: torch.Tensor) -> torch.Tensor:
    """KL between target and drafter over the target's top k plus one bucket for the rest.

    ``logp_top``, ``logq_top``: [positions, k] full-vocabulary log-probabilities of the
    target's top-k tokens. Merging the other tokens into one bucket keeps the divergence a
    true KL (>= 0, zero iff the drafter matches on the top k) and a lower bound of the full KL.
    """
    p_top = logp_top.exp()
    tail_p = (1 - p_top.sum(-1)).clamp_min(1e-6)  # [positions]
    tail_q = (1 - logq_top.exp().sum(-1)).clamp_min(1e-6)
    return (p_top * (logp_top - logq_top)).sum(-1) + tail_p * (tail_p.log() - tail_q.log())


def sequence_loss(drafter: torch.nn.Module, sequence: TrainingSequence, config: TrainConfig) -> tuple[torch.Tensor, float, float]:
    """Weighted mean loss over the positions of one sequence; also its KL and cross-entropy parts."""
    ids = sequence.token_ids[None, :]  # [1, length]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.autocast_bfloat16):
        logits = drafter(input_ids=ids, use_cache=False).logits[0, :-1]  # [length - 1, vocab]
    logq = torch.log_softmax(logits.float(), dim=-1)  # [length - 1, vocab]
    logq_top = logq.gather(-1, sequence.top_indices.long())  # [length - 1, k]
    kl = top_k_kl(sequence.top_logprobs, logq_top)  # [length - 1]
    cross_entropy = -logq_top[:, 0]  # the target's top-1 token
    weights = torch.ones(kl.shape[0])
    weights[: max(0, sequence.prompt_length - 1)] = config.prompt_weight  # rows predicting prompt tokens
    weights = weights / weights.sum()
    loss = (weights * (config.kl_weight * kl + config.cross_entropy_weight * cross_entropy)).sum()
    return loss, float((weights * kl).detach().sum()), float((weights * cross_entropy).detach().sum())


def _trainable_names(drafter: torch.nn.Module) -> list[str]:
    return [name for name, parameter in drafter.named_parameters() if parameter.requires_grad]


def save_checkpoint(path: Path, drafter, optimizer, step: int, seconds: float, losses: list, key: dict) -> None:
    """Trainable weights, AdamW state, step, time and losses, written atomically; ``key`` names the run."""
    parameters = dict(drafter.named_parameters())
    state = {"key": key, "step": step, "seconds": seconds, "losses": [list(row) for row in losses],
             "weights": {name: parameters[name].detach().clone() for name in _trainable_names(drafter)},
             "optimizer": optimizer.state_dict()}
    write_file_atomic(path, lambda temporary: torch.save(state, temporary))


def load_checkpoint(path: Path, drafter, optimizer, key: dict) -> tuple[int, float, list]:
    """Restore a checkpoint of the run ``key`` into ``drafter`` and ``optimizer``; (step, seconds, losses)."""
    state = torch.load(path, weights_only=True)
    parameters = dict(drafter.named_parameters())
    if state.get("key") != key or sorted(state["weights"]) != sorted(_trainable_names(drafter)):
        raise SpecplanError(f"{path} is a checkpoint of another distillation run (target, layers, seed or settings "
                            "differ); pass --restart to start over or -o another directory")
    with torch.no_grad():
        for name, tensor in state["weights"].items():
            parameters[name].copy_(tensor)
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"]), float(state["seconds"]), [tuple(row) for row in state["losses"]]


def _optimizer_step(drafter, optimizer, trainable, sequences, step: int, config: TrainConfig,
                    loss_of=sequence_loss) -> tuple[float, float, float]:
    """One AdamW step over ``batch_sequences`` sequences; the mean loss, KL and cross-entropy."""
    for group in optimizer.param_groups:
        group["lr"] = learning_rate_at(step, config)
    optimizer.zero_grad(set_to_none=True)
    totals = [0.0, 0.0, 0.0]
    chosen = batch_indices(step, len(sequences), config)
    for index in chosen:
        loss, kl, cross_entropy = loss_of(drafter, sequences[index], config)
        (loss / len(chosen)).backward()
        for slot, value in enumerate((float(loss.detach()), kl, cross_entropy)):
            totals[slot] += value / len(chosen)
    torch.nn.utils.clip_grad_norm_(trainable, config.clip_norm)
    optimizer.step()
    return totals[0], totals[1], totals[2]


def run_key(config: TrainConfig, extra: dict) -> dict:
    """What a checkpoint must match to be resumed: every setting but the stopping rules, plus ``extra``."""
    settings = {name: value for name, value in config.__dict__.items()
                if name not in ("steps", "budget_minutes", "checkpoint_every")}
    return {**settings, **extra}


def train(drafter: torch.nn.Module, sequences: list, config: TrainConfig,
          checkpoint: Path, deadline: float | None = None, key: dict | None = None,
          loss_of=sequence_loss, freeze=freeze_shared) -> TrainResult:
    """Train ``drafter`` in place up to ``config.steps`` (or until ``time.monotonic() >= deadline``),
    resuming from ``checkpoint`` when it exists and saving to it every ``checkpoint_every`` steps.

    ``key`` (see :func:`run_key`) identifies the run; a checkpoint of another run is refused.
    ``loss_of(drafter, sequence, config)`` gives (loss, kl, cross-entropy) of one sequence and
    ``freeze(drafter)`` the trainable parameters (defaults: the few-layer model drafter's)."""
    key = key if key is not None else run_key(config, {})
    if not sequences:
        raise SpecplanError("no training sequences; pass calibration prompts that the target can continue")
    torch.manual_seed(config.seed)
    trainable = freeze(drafter)
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay)
    step, seconds, losses = 0, 0.0, []
    if checkpoint.is_file():
        step, seconds, losses = load_checkpoint(checkpoint, drafter, optimizer, key)
    drafter.train()
    stopped_by = "steps"
    started = time.monotonic() - seconds
    with tqdm(total=config.steps, initial=step, desc="distill: training", unit="step") as bar:
        while step < config.steps:
            if deadline is not None and time.monotonic() >= deadline:
                stopped_by = "budget"
                break
            loss, kl, cross_entropy = _optimizer_step(drafter, optimizer, trainable, sequences, step, config, loss_of)
            step += 1
            losses.append((step, round(loss, 5), round(kl, 5), round(cross_entropy, 5)))
            bar.set_postfix(loss=f"{loss:.3f}", kl=f"{kl:.3f}")
            bar.update(1)
            if step % config.checkpoint_every == 0 or step == config.steps:
                save_checkpoint(checkpoint, drafter, optimizer, step, time.monotonic() - started, losses, key)
    seconds = time.monotonic() - started
    if stopped_by == "budget":
        save_checkpoint(checkpoint, drafter, optimizer, step, seconds, losses, key)
    drafter.eval()
    for parameter in drafter.parameters():
        parameter.requires_grad_(False)
    return TrainResult(step, seconds, tuple(losses), stopped_by)
