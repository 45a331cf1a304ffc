"""Held-out measurement of a drafter: greedy agreement with the target and latency.

On Spec-Bench evaluation prompts (question_id not divisible by 4; never trained on), the
target decodes greedily with the runtime's own engine; the profiler's replay
(``runtime/profiler/acceptance.py``) then gives the drafter's per-token acceptance alpha,
its accepted-length histogram over chains of ``gamma`` and its rank vector (Sequoia,
arXiv 2402.12374), and ``measure_latency`` its T(1) over a warm cache, beside the target's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from specplan.core.prompts import Prompt
from specplan.runtime.build import eos_ids
from specplan.models.chat import encode_prompt
from specplan.distill.config import EvalConfig
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import SpeculativeEngine
from specplan.models.load import LoadedModel
from specplan.profiler.acceptance import AcceptanceCounter, replay_model
from specplan.profiler.latency import measure_latency


@dataclass(frozen=True)
class DrafterScore:
    name: str
    alpha: float
    top1: float  # rank_accept[0]: how often the drafter's argmax is the target's token (profiler sampling)
    rank_accept: tuple[float, ...]
    accepted_hist: tuple[int, ...]
    t1_ms: float  # one forward of one new token over ``context`` cached tokens

    def as_dict(self) -> dict:
        return {"name": self.name, "alpha": round(self.alpha, 4), "top1": round(self.top1, 4),
                "rank_accept": [round(value, 4) for value in self.rank_accept],
                "accepted_hist": list(self.accepted_hist), "t1_ms": round(self.t1_ms, 3)}


def target_outputs(target: LoadedModel, prompts: list[Prompt], config: EvalConfig,
                   device: torch.device) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, the target's greedy continuation) per prompt, with the runtime's plain decoding."""
    engine = SpeculativeEngine(target.model, device, eos_ids(target))
    pairs = []
    for prompt in tqdm(prompts, desc="distill: target greedy decoding (evaluation prompts)", unit="prompt"):
        prompt_ids = encode_prompt(target.tokenizer, prompt.text)
        result = engine.generate(prompt_ids, config.max_new_tokens, SamplingConfig())
        pairs.append((prompt_ids, list(result.token_ids)))
    return pairs


def load_or_make_outputs(path: Path, target: LoadedModel, prompts: list[Prompt], config: EvalConfig,
                         device: torch.device) -> list[tuple[list[int], list[int]]]:
    """``target_outputs`` cached in ``path`` (keyed by the target's fingerprint, prompts and length)."""
    key = {"fingerprint": target.fingerprint, "dtype": target.dtype, "prompts": [p.prompt_id for p in prompts],
           "max_new_tokens": config.max_new_tokens}
    if path.is_file():
        stored = torch.load(path, weights_only=True)
        if stored.get("key") == key:
            return [(list(a), list(b)) for a, b in stored["pairs"]]
    pairs = target_outputs(target, prompts, config, device)
    torch.save({"key": key, "pairs": pairs}, path)
    return pairs


def context_ids(pairs: list[tuple[list[int], list[int]]], length: int) -> list[int]:
    """``length`` tokens of evaluation text (repeated if short) for the latency cache."""
    ids: list[int] = []
    for prompt_ids, output_ids in pairs:
        ids.extend(prompt_ids + output_ids)
    while ids and len(ids) < length:
        ids = ids + ids
    return ids[:length]


def score(name: str, network: torch.nn.Module, pairs, config: EvalConfig, device: torch.device,
          latency: bool = True) -> DrafterScore:
    """Replay ``pairs`` through ``network``; with ``latency``, also time its T(1)."""
    counter = AcceptanceCounter(config.gamma, config.width)
    for prompt_ids, output_ids in pairs:
        replay_model(counter, network, prompt_ids, output_ids, device)
    t1 = float("nan")
    if latency:
        t1 = measure_latency(network, device, context_ids(pairs, config.context), (1,), config.repeats).ms[0]
    top1 = counter.rank_accept[0] if counter.rank_accept else 0.0
    return DrafterScore(name, counter.alpha, top1, counter.rank_accept, tuple(counter.hist), t1)


def target_t1(target: LoadedModel, pairs, config: EvalConfig, device: torch.device) -> float:
    """The target's T(1) on the same cache length."""
    return measure_latency(target.model, device, context_ids(pairs, config.context), (1,), config.repeats).ms[0]
