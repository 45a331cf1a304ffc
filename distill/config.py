"""Settings of one distillation run (frozen; recorded in ``distill.yaml``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class DataConfig:
    """What the target generates and what is kept of its logits (FastDraft, arXiv 2411.11055:
    the drafter learns from text the target wrote itself)."""

    train_limit: int = 80  # calibration prompts (Spec-Bench question_id % 4 == 0) that profile does not measure on
    max_new_tokens: int = 128  # greedy continuation per prompt
    sampled_per_prompt: int = 0  # extra sampled continuations per prompt (more varied text)
    self_prompts: int = 0  # extra prompts the target writes itself (Magpie, arXiv 2406.08464), answered greedily
    temperature: float = 0.8  # of the sampled continuations
    top_k: int = 64  # target log-probabilities kept per position (the truncated KL's support)
    max_length: int = 1024  # longest training sequence; longer ones keep their last tokens
    batch_size: int = 64  # prompts decoded together (left padding; similar lengths): 255 tok/s vs 186 at 24
    dtype: str = "bfloat16"  # the target's dtype while generating (the runtime default)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation: AdamW over the drafter's decoder layers and final norm."""

    steps: int = 300
    budget_minutes: float = 20.0  # the whole command stops training when this much wall time has passed
    seed: int = 0
    learning_rate: float = 1e-3
    warmup_steps: int = 20
    min_learning_rate_fraction: float = 0.1  # cosine decay to this fraction of the peak
    weight_decay: float = 0.0
    batch_sequences: int = 2  # sequences per optimizer step (gradient accumulation)
    kl_weight: float = 1.0  # KL(target || drafter) over the target's top-k
    cross_entropy_weight: float = 0.5  # cross-entropy on the target's top-1 token
    prompt_weight: float = 0.5  # loss weight of prompt positions (continuation positions weigh 1)
    clip_norm: float = 1.0
    checkpoint_every: int = 25
    autocast_bfloat16: bool = False  # bf16 autocast on CPU (faster, less exact)


@dataclass(frozen=True)
class EvalConfig:
    """Held-out measurement on Spec-Bench evaluation prompts (never trained on)."""

    eval_limit: int = 12
    max_new_tokens: int = 64
    gamma: int = 8  # chain length of the acceptance histogram
    width: int = 8  # ranks counted in the rank vector
    context: int = 256  # cached tokens under the T(1) measurement
    repeats: int = 7


@dataclass(frozen=True)
class DistillConfig:
    kind: str = "model"
    layers: tuple[int, ...] = ()  # target layers the drafter starts from; () = default_layers()
    num_layers: int = 4  # used when ``layers`` is empty
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluation: EvalConfig = field(default_factory=EvalConfig)

    def as_dict(self) -> dict:
        """Plain types for YAML (tuples as lists)."""
        document = asdict(self)
        document["layers"] = list(self.layers)
        return document
