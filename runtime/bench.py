"""``specplan bench``: a plan against plain decoding of the same weights, in one run.

Methods are interleaved prompt by prompt (plan, plain, plan, plain ...) after a warm-up so
that machine drift cancels. Reported per prompt and per category: new tokens, tokens/s,
speedup over plain, mean accepted tokens per target forward (bonus included, Spec-Bench's
definition), and the lossless check: identical tokens to plain decoding, or, where they
differ, whether the first divergence is a numerical near-tie (top-2 logit gap of the
target at that point below ``NEAR_TIE``) as low-precision arithmetic can produce.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from specplan.prompts import Prompt
from specplan.runtime.chat import encode_prompt
from specplan.runtime.drafters.base import SamplingConfig

NEAR_TIE = 0.5  # logits: a bf16 forward over n tokens differs from n decode steps by up to ~0.1-0.3


@dataclass(frozen=True)
class PromptRow:
    prompt_id: str
    category: str
    new_tokens: int
    plan_tokens_per_s: float
    plain_tokens_per_s: float
    speedup: float
    mean_accepted: float
    identical: bool
    divergence_gap: float | None  # target's top-2 logit gap at the first differing token


@dataclass
class BenchReport:
    plan_summary: str
    predicted_tokens_per_s: float
    predicted_speedup: float
    dtype: str
    device: str
    rows: list[PromptRow] = field(default_factory=list)

    def categories(self) -> dict[str, list[PromptRow]]:
        grouped: dict[str, list[PromptRow]] = defaultdict(list)
        for row in self.rows:
            grouped[row.category].append(row)
        return dict(grouped)

    @staticmethod
    def aggregate(rows: list[PromptRow]) -> dict:
        """Totals: tokens/s as total tokens over total seconds; speedup = ratio of those."""
        tokens = sum(r.new_tokens for r in rows)
        plan_seconds = sum(r.new_tokens / r.plan_tokens_per_s for r in rows if r.plan_tokens_per_s)
        plain_seconds = sum(r.new_tokens / r.plain_tokens_per_s for r in rows if r.plain_tokens_per_s)
        return {
            "prompts": len(rows),
            "new_tokens": tokens,
            "plan_tokens_per_s": tokens / plan_seconds if plan_seconds else 0.0,
            "plain_tokens_per_s": tokens / plain_seconds if plain_seconds else 0.0,
            "speedup": plain_seconds / plan_seconds if plan_seconds else 0.0,
            "median_speedup": statistics.median(r.speedup for r in rows),
            "mean_accepted": statistics.fmean(r.mean_accepted for r in rows),
            "identical": sum(r.identical for r in rows),
            "near_ties": sum(1 for r in rows if not r.identical and r.divergence_gap is not None and r.divergence_gap < NEAR_TIE),
        }

    def markdown(self) -> str:
        overall = self.aggregate(self.rows)
        lines = [
            f"plan: {self.plan_summary} ({self.dtype}, {self.device}); predicted {self.predicted_tokens_per_s:.1f} tok/s, "
            f"{self.predicted_speedup:.2f}x",
            "",
            "| category | prompts | plan tok/s | plain tok/s | speedup | accepted/forward | identical | near-ties |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, rows in sorted(self.categories().items()) + [("all", self.rows)]:
            a = self.aggregate(rows)
            lines.append(f"| {name} | {a['prompts']} | {a['plan_tokens_per_s']:.1f} | {a['plain_tokens_per_s']:.1f} | "
                         f"{a['speedup']:.2f}x | {a['mean_accepted']:.2f} | {a['identical']}/{a['prompts']} | {a['near_ties']} |")
        lines.append("")
        lines.append(f"measured speedup {overall['speedup']:.2f}x (predicted {self.predicted_speedup:.2f}x); "
                     f"{overall['identical']}/{overall['prompts']} outputs token-identical to plain decoding, "
                     f"{overall['near_ties']} of the others diverge at a near-tie (top-2 gap < {NEAR_TIE})")
        return "\n".join(lines)

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "report.md").write_text(self.markdown() + "\n")
        document = {k: v for k, v in asdict(self).items() if k != "rows"}
        document["rows"] = [asdict(r) for r in self.rows]
        document["overall"] = self.aggregate(self.rows)
        document["categories"] = {name: self.aggregate(rows) for name, rows in self.categories().items()}
        (folder / "report.json").write_text(json.dumps(document, indent=2))


@torch.inference_mode()
def divergence_gap(model: torch.nn.Module, prompt_ids: list[int], first: list[int], second: list[int]) -> float | None:
    """Top-2 logit gap of ``model`` at the first index where two outputs differ (None if one is a prefix)."""
    index = next((i for i, (a, b) in enumerate(zip(first, second)) if a != b), None)
    if index is None:
        return None
    device = next(model.parameters()).device
    ids = torch.tensor([prompt_ids + first[:index]], device=device)
    logits = model(input_ids=ids, use_cache=False).logits[0, -1].float()
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


def run_bench(runner, prompts: list[Prompt], max_new_tokens: int) -> BenchReport:
    """Measure ``runner``'s plan against plain decoding on ``prompts``, interleaved."""
    sampling = SamplingConfig()
    warm = encode_prompt(runner.target.tokenizer, prompts[0].text)
    runner.generate(warm, 8, sampling)
    runner.generate(warm, 8, sampling, plain=True)
    report = BenchReport(runner.plan.summary(), runner.plan.predicted.tokens_per_s, runner.plan.predicted.speedup,
                         runner.target.dtype, str(runner.device))
    for prompt in tqdm(prompts, desc="bench: plan vs plain", unit="prompt"):
        prompt_ids = encode_prompt(runner.target.tokenizer, prompt.text)
        planned = runner.generate(prompt_ids, max_new_tokens, sampling)
        plain = runner.generate(prompt_ids, max_new_tokens, sampling, plain=True)
        identical = list(planned.token_ids) == list(plain.token_ids)
        gap = None if identical else divergence_gap(runner.target.model, prompt_ids, list(planned.token_ids), list(plain.token_ids))
        report.rows.append(PromptRow(
            prompt.prompt_id, prompt.category, len(planned.token_ids), planned.tokens_per_s, plain.tokens_per_s,
            planned.tokens_per_s / plain.tokens_per_s if plain.tokens_per_s else 0.0, planned.mean_accepted,
            identical, gap,
        ))
    return report
