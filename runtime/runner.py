"""Executes a plan on prompts: loads the profiled models, checks the plan's contract, and
returns a typed :class:`RunResult` per prompt (``as_record()``: the ``run --json`` object,
docs/formats.md)."""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from specplan.core.contract import check_contract, check_weights
from specplan.core.plan import Plan
from specplan.core.profile import Profile
from specplan.core.prompts import Prompt
from specplan.runtime.adaptive import AdaptiveEngine, AdaptiveResult
from specplan.runtime.adaptive_build import build_adaptive_engine
from specplan.runtime.backend import Session
from specplan.runtime.backends import Backend, backend_for
from specplan.runtime.batcher import TogetherResult, generate_together
from specplan.runtime.build import build_engine, build_rows_for, lookup_rows
from specplan.runtime.context import check_fits, draft_width
from specplan.models.chat import encode_prompt
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import GenerationResult, SpeculativeEngine
from specplan.runtime.load_schedule import LoadChoice, LoadSchedule, load_schedule
from specplan.runtime.lossless import NEAR_TIE, divergence_gap, first_divergence
from specplan.models.load import LoadedModel, quiet_transformers
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.planner.recheck import check_prediction
from specplan.runtime.device import describe_device


@dataclass(frozen=True)
class PlainComparison:
    """Plain decoding of the same prompt in the same process (``compare_plain``). Where the outputs
    part, ``divergence`` is the first differing new token and ``gap`` the target's top-2 logit gap
    there (runtime/lossless.py): below NEAR_TIE it is a numerical near-tie of 16-bit arithmetic."""

    tokens_per_s: float
    speedup: float | None
    identical: bool
    divergence: int | None = None
    gap: float | None = None

    @property
    def near_tie(self) -> bool:
        return not self.identical and self.gap is not None and self.gap < NEAR_TIE

    def describe(self, dtype: str) -> str:
        if self.identical:
            return "identical output: yes"
        where = f"outputs part at new token {self.divergence}, where the target's top-2 logit gap is {self.gap:.3f}"
        if self.near_tie and dtype == "gguf":  # the llama.cpp backend
            return (f"{where}: a llama.cpp near-tie (< {NEAR_TIE}): a decode of n tokens rounds differently from "
                    "n one-token decodes (docs/backends.md), not a lossless failure")
        if self.near_tie:
            return f"{where}: a {dtype} near-tie (< {NEAR_TIE}), not a lossless failure; float32 is token-identical"
        return f"{where}: NOT a near-tie; a lossless failure, please report it"


@dataclass(frozen=True)
class Together:
    """Engines of ``plan`` (one per sequence) whose forwards ``batcher`` decodes together (None: one engine,
    alone), and the load schedule their rounds play by (runtime/load_schedule.py)."""

    plan: Plan
    engines: tuple | list
    batcher: object
    load: LoadSchedule

    def choice(self, batch: int) -> LoadChoice:
        """What a round plays with ``batch`` sequences in flight."""
        return self.load.at(batch)

    def generate(self, prompt_ids, max_new_tokens: int, samplings) -> TogetherResult:
        """Prompt i on engine i with ``samplings[i]``, all together (runtime/batcher.py)."""
        return generate_together(self.batcher, self.engines[:len(prompt_ids)], prompt_ids, max_new_tokens, samplings)


@dataclass(frozen=True)
class RunResult:
    """One prompt decoded by a plan. ``mean_accepted`` counts the bonus token (tokens committed
    per target forward); ``stages`` are the per-stage records of docs/formats.md, "run --json"."""

    prompt_id: str
    category: str
    token_ids: tuple[int, ...]
    text: str
    seconds: float
    tokens_per_s: float
    target_forwards: int
    mean_accepted: float
    stages: tuple[dict, ...]
    predicted_tokens_per_s: float
    plain: PlainComparison | None = None
    adaptive: dict | None = None  # an adaptive plan's `configurations`, `switches`, `replans`, `adaptive_seconds`
    plain_rounds: int = 0  # rounds the fallback guard played as plain decoding (runtime/fallback.py)
    fallbacks: int = 0  # times it left the plan for plain decoding

    @property
    def new_tokens(self) -> int:
        return len(self.token_ids)

    def as_record(self) -> dict:
        """The ``run --json`` object (field names and rounding as before this type existed)."""
        record = {
            "prompt_id": self.prompt_id, "category": self.category, "new_tokens": self.new_tokens,
            "token_ids": list(self.token_ids), "text": self.text, "seconds": round(self.seconds, 4),
            "tokens_per_s": round(self.tokens_per_s, 3), "target_forwards": self.target_forwards,
            "mean_accepted": round(self.mean_accepted, 4), "stages": [dict(stage) for stage in self.stages],
            "predicted_tokens_per_s": self.predicted_tokens_per_s,
            "plain_rounds": self.plain_rounds, "fallbacks": self.fallbacks,
        }
        if self.adaptive is not None:
            record.update(self.adaptive)
        if self.plain is not None:
            record["plain_tokens_per_s"] = round(self.plain.tokens_per_s, 3)
            record["speedup"] = round(self.plain.speedup, 4) if self.plain.speedup is not None else None
            record["identical_to_plain"] = self.plain.identical
            if not self.plain.identical:
                record["first_divergence"] = self.plain.divergence
                record["divergence_gap"] = None if self.plain.gap is None else round(self.plain.gap, 4)
        return record


def adaptive_record(result: GenerationResult) -> dict | None:
    """The ``run --json`` fields of an adaptive plan's generation (None for a static plan)."""
    if not isinstance(result, AdaptiveResult):
        return None
    return {"configurations": [use.as_record() for use in result.configurations], "switches": result.switches,
            "replans": result.replans, "adaptive_seconds": round(result.adaptive_seconds, 4)}


def profiled_runtime(profile: Profile) -> RuntimeMode:
    """The runtime whose latency ``profile`` measured: compiled steps, or eager."""
    return RuntimeMode("compiled") if profile.target.mode == "compiled" else EAGER


@dataclass
class PlanRunner:
    plan: Plan
    profile: Profile
    target: LoadedModel
    engine: SpeculativeEngine | AdaptiveEngine
    plain: SpeculativeEngine
    device: torch.device
    runtime: RuntimeMode = EAGER
    fallback: bool = True

    @classmethod
    def open(cls, plan: Plan, profile: Profile, profile_path: Path, force: bool = False,
             runtime: RuntimeMode | None = None, threads: int = 0, fallback: bool = True,
             sessions=None) -> "PlanRunner":
        """``runtime`` None: the one the profile measured (its target's ``mode``), so the plan's
        predictions hold; another one runs with a warning that they assume the profiled one.
        The plan runs on its profile's backend (``profile.backend``); ``threads``: llama.cpp's (0: every core);
        ``fallback``: plain decoding plays the rounds where the plan stops paying (runtime/fallback.py);
        ``sessions``: where the sessions of sequences decoded together come from (runtime/batcher.py: slots of
        a llama.cpp context, runtime/llama_cpp_shared.py, or rows of a torch batched cache, runtime/torch_shared.py),
        None: each session loads its own."""
        quiet_transformers()
        runtime = runtime if runtime is not None else profiled_runtime(profile)
        kind = profile.device.kind
        device = torch.device("cuda" if kind == "cuda" and torch.cuda.is_available() else "cpu")
        check_contract(plan, profile, profile_path, describe_device(device), None, force)  # before any weights load
        backend = backend_for(profile.backend)
        target = backend.open_target(plan, profile, device, threads, sessions)
        check_weights(profile, target.fingerprint, force)
        if not force:
            check_prediction(plan, profile)  # a hand-edited shape does not run under the old prediction
        if profile.target.mode != runtime.profile_label:
            warnings.warn(f"the profile measured the {profile.target.mode} runtime but this run uses "
                          f"{runtime.profile_label} (--runtime / SPECPLAN_RUNTIME): the plan's predictions assume "
                          "the profiled one")
        if plan.adaptive is not None:
            engine = build_adaptive_engine(plan, profile, target, device, runtime)
        else:
            engine = build_engine(plan, profile, target, device, runtime, fallback=fallback)
        # llama.cpp: plain decoding shares the engine's target session (each generate resets it)
        plain_target = engine.target if backend.shares_target_session else target.model
        plain = SpeculativeEngine(plain_target, device, engine.eos_ids, runtime=runtime)
        return cls(plan, profile, target, engine, plain, device, runtime, fallback)

    def slot_engines(self, count: int) -> list[SpeculativeEngine]:
        """``count`` engines of the plan for requests decoded at once: the runner's own, then new ones
        whose sessions the target's session source gives (each a slot of a shared llama.cpp context or a row
        of a torch batched cache)."""
        if count > 1 and (self.target.sessions is None or self.plan.adaptive is not None):
            raise ValueError("several engines need a static plan opened with a session source")
        return [self.engine] + [build_engine(self.plan, self.profile, self.target, self.device, self.runtime,
                                             fallback=self.fallback) for _ in range(count - 1)]

    def engines_together(self, size: int, stages: tuple | None = None, scheduled: bool = True,
                         stop_at_eos: bool = True, own: bool = False) -> Together:
        """``size`` engines of ``stages`` (None: the plan's) whose forwards are decoded together: the runner's slot
        engines where they are those (the plan's stages, the session source the runner was opened with, not
        ``own``), else engines over a session source of their own (the backend's, ``size`` slots). ``scheduled``:
        each round plays the schedule's row for the sequences in flight (runtime/load_schedule.py), relative to
        ``stages``; else ``stages`` every round. ``stop_at_eos`` False: every sequence decodes its whole budget."""
        plan = self.plan if stages is None else replace(self.plan, stages=tuple(stages))
        target = self.target
        if plan.stages == self.plan.stages and not own and stop_at_eos and \
                (size == 1 or (target.sessions is not None and target.sessions.slots >= size)):
            engines = self.slot_engines(size)
        else:
            sessions = self.runtime_backend.shared_sessions(plan, self.profile, size, target.threads)
            target = replace(target, sessions=sessions)
            engines = [build_engine(plan, self.profile, target, self.device, self.runtime, fallback=self.fallback,
                                    stop_at_eos=stop_at_eos) for _ in range(size)]
        batcher = target.sessions.batcher if size > 1 else None
        load = self.load_schedule(engines, plan, size, batcher)
        for engine in engines:
            engine.load = load if scheduled and size > 1 else None
        return Together(plan, engines, batcher, load)

    def load_schedule(self, engines, plan: Plan, size: int, batcher) -> LoadSchedule:
        """What ``engines`` of ``plan``, ``size`` decoded together by ``batcher``, play at each load
        (runtime/load_schedule.py); each engine can build the lookup rows the schedule holds."""
        load = load_schedule(plan, self.profile, size, batcher, lookup_rows(self.profile, plan))
        for engine in engines:
            if isinstance(engine, SpeculativeEngine):
                build_rows_for(engine, self.profile, self.target, self.device, self.runtime)
        return load

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

    @property
    def backend(self) -> str:
        return self.target.backend

    @property
    def runtime_backend(self) -> Backend:
        """The backend the plan runs on (runtime/backends/)."""
        return backend_for(self.target.backend)

    @property
    def shared_session(self) -> Session | None:
        """The target session every engine of this run must reuse (one llama.cpp context), else None."""
        return self.plain.target if self.runtime_backend.shares_target_session else None

    @property
    def reference_model(self):
        """What reads the target's logits for a divergence's top-2 gap: the torch model, or on
        llama.cpp the plain engine's session (reset before and after each read)."""
        session = self.shared_session
        return session if session is not None else self.target.model

    def check_prompt(self, prompt: Prompt, max_new_tokens: int) -> list[int]:
        """The prompt's token ids; PromptError if it and ``max_new_tokens`` do not fit the target's context."""
        prompt_ids = encode_prompt(self.target.tokenizer, prompt.text)
        label = "the prompt" if prompt.prompt_id == "prompt" else f"prompt {prompt.prompt_id}"
        context = self.runtime_backend.context(self.target)
        check_fits(len(prompt_ids), max_new_tokens, draft_width(self.plan), context, label)
        return prompt_ids

    def run_prompt(self, prompt: Prompt, max_new_tokens: int, temperature: float, top_p: float, seed: int,
                   stream: bool = False, compare_plain: bool = False) -> RunResult:
        """Generate for one prompt (and, with ``compare_plain``, plainly as well)."""
        prompt_ids = self.check_prompt(prompt, max_new_tokens)
        sampling = SamplingConfig(temperature, top_p, seed)
        result = self.generate(prompt_ids, max_new_tokens, sampling, stream=stream)
        plain = None
        if compare_plain:
            baseline = self.generate(prompt_ids, max_new_tokens, sampling, plain=True)
            speedup = result.tokens_per_s / baseline.tokens_per_s if baseline.tokens_per_s else None
            index = first_divergence(baseline.token_ids, result.token_ids) if sampling.greedy else None
            identical = list(baseline.token_ids) == list(result.token_ids)
            gap = divergence_gap(self.reference_model, prompt_ids, baseline.token_ids, index) if index is not None else None
            plain = PlainComparison(baseline.tokens_per_s, speedup, identical, index, gap)
        return RunResult(
            prompt_id=prompt.prompt_id, category=prompt.category, token_ids=tuple(result.token_ids),
            text=self.target.tokenizer.decode(result.token_ids, skip_special_tokens=True),
            seconds=result.seconds, tokens_per_s=result.tokens_per_s, target_forwards=result.target_forwards,
            mean_accepted=result.mean_accepted,
            stages=tuple(stats.as_record() for stats in result.stages if stats.drafter != "none"),
            predicted_tokens_per_s=self.plan.predicted.tokens_per_s, plain=plain, adaptive=adaptive_record(result),
            plain_rounds=result.plain_rounds, fallbacks=result.fallbacks)

    def summary_line(self, result: RunResult) -> str:
        backend = self.target.backend + (f" ({self.profile.device.numerics} numerics)" if self.profile.device.numerics else "")
        line = (f"[specplan] {backend}: {result.new_tokens} tokens in {result.seconds:.2f} s: "
                f"{result.tokens_per_s:.1f} tok/s, "
                f"{result.mean_accepted:.2f} tokens per target forward ({self.plan.summary()}; predicted "
                f"{self.plan.predicted.tokens_per_s:.1f} tok/s)")
        if result.fallbacks:
            line += (f"; speculation did not pay here: {result.plain_rounds} of {result.target_forwards} rounds "
                     "fell back to plain decoding")
        plain = result.plain
        if plain is not None:
            speedup = f"{plain.speedup:.2f}x" if plain.speedup is not None else "n/a"
            line += (f"; plain decoding {plain.tokens_per_s:.1f} tok/s -> speedup {speedup} "
                     f"({plain.describe(self.target.dtype)})")
        return line
