"""Executes a plan on prompts: loads the profiled models, checks the plan's contract, and
returns per-prompt records in the shape of ``run --json`` (formats.md)."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from specplan.contract import check_contract
from specplan.plan import Plan
from specplan.profile import Profile
from specplan.prompts import Prompt
from specplan.runtime.build import build_engine, eos_ids
from specplan.runtime.chat import encode_prompt
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import GenerationResult, SpeculativeEngine
from specplan.runtime.models import LoadedModel, load_model, quiet_transformers
from specplan.runtime.modes import profile_mode
from specplan.runtime.profiler.device import describe_device


@dataclass
class PlanRunner:
    plan: Plan
    profile: Profile
    target: LoadedModel
    engine: SpeculativeEngine
    plain: SpeculativeEngine
    device: torch.device

    @classmethod
    def open(cls, plan: Plan, profile: Profile, profile_path: Path, force: bool = False) -> "PlanRunner":
        quiet_transformers()
        kind = profile.device.kind
        device = torch.device("cuda" if kind == "cuda" and torch.cuda.is_available() else "cpu")
        target = load_model(profile.target.source, profile.target.dtype, str(device), quant=profile.target.quant)
        check_contract(plan, profile, profile_path, describe_device(device), target.fingerprint, force)
        if profile.target.mode != profile_mode():
            warnings.warn(f"the profile measured the {profile.target.mode} runtime but this run uses {profile_mode()} "
                          "(--runtime / SPECPLAN_RUNTIME): the plan's predictions assume the profiled one")
        engine = build_engine(plan, profile, target, device)
        plain = SpeculativeEngine(target.model, device, eos_ids(target))
        return cls(plan, profile, target, engine, plain, device)

    def generate(self, prompt_ids: list[int], max_new_tokens: int, sampling: SamplingConfig,
                 plain: bool = False, stream: bool = False) -> GenerationResult:
        engine = self.plain if plain else self.engine
        on_commit = None
        if stream:
            tokenizer = self.target.tokenizer
            printed = [0]
            generated: list[int] = []

            def on_commit(chunk: list[int]) -> None:
                generated.extend(chunk)
                text = tokenizer.decode(generated, skip_special_tokens=True)
                sys.stdout.write(text[printed[0]:])
                sys.stdout.flush()
                printed[0] = len(text)

        result = engine.generate(prompt_ids, max_new_tokens, sampling, on_commit)
        if stream:
            sys.stdout.write("\n")
        return result

    def run_prompt(self, prompt: Prompt, max_new_tokens: int, temperature: float, top_p: float, seed: int,
                   stream: bool = False, compare_plain: bool = False) -> dict:
        """Generate for one prompt; the record has the ``run --json`` fields."""
        prompt_ids = encode_prompt(self.target.tokenizer, prompt.text)
        sampling = SamplingConfig(temperature, top_p, seed)
        result = self.generate(prompt_ids, max_new_tokens, sampling, stream=stream)
        record = {
            "prompt_id": prompt.prompt_id,
            "category": prompt.category,
            "new_tokens": len(result.token_ids),
            "token_ids": list(result.token_ids),
            "text": self.target.tokenizer.decode(result.token_ids, skip_special_tokens=True),
            "seconds": round(result.seconds, 4),
            "tokens_per_s": round(result.tokens_per_s, 3),
            "target_forwards": result.target_forwards,
            "mean_accepted": round(result.mean_accepted, 4),
            "stages": [stats.as_record() for stats in result.stages if stats.drafter != "none"],
            "predicted_tokens_per_s": self.plan.predicted.tokens_per_s,
        }
        if compare_plain:
            baseline = self.generate(prompt_ids, max_new_tokens, sampling, plain=True)
            record["plain_tokens_per_s"] = round(baseline.tokens_per_s, 3)
            record["speedup"] = round(result.tokens_per_s / baseline.tokens_per_s, 4) if baseline.tokens_per_s else None
            record["identical_to_plain"] = list(baseline.token_ids) == list(result.token_ids)
        return record

    def summary_line(self, record: dict) -> str:
        line = (f"[specplan] {record['new_tokens']} tokens in {record['seconds']:.2f} s: {record['tokens_per_s']:.1f} tok/s, "
                f"{record['mean_accepted']:.2f} tokens per target forward ({self.plan.summary()}; predicted "
                f"{self.plan.predicted.tokens_per_s:.1f} tok/s)")
        if "speedup" in record:
            line += (f"; plain decoding {record['plain_tokens_per_s']:.1f} tok/s -> speedup {record['speedup']:.2f}x"
                     f" (identical output: {'yes' if record['identical_to_plain'] else 'no'})")
        return line
