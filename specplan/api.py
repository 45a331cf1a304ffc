"""The public Python API: the same profile -> plan -> run flow as the command line.

>>> import specplan
>>> profile = specplan.load_profile("profiles/cpu/profile.yaml")
>>> plan = specplan.solve(profile, profile_path="profiles/cpu/profile.yaml")
>>> plan.summary()
'ngram-5 -> target (tree 2 nodes depth 1)'

Running a plan loads its models (torch)::

    with specplan.Runner.open("plan.yaml") as runner:
        result = runner.generate("Write a haiku about caches.", max_new_tokens=64)
        print(result.text, result.tokens_per_s)

    with specplan.Runner.open("plan.yaml", batch=4) as runner:  # prompts decoded 4 at a time, together
        for batch in runner.generate_batches(["First prompt", "Second prompt"], max_new_tokens=64):
            print(batch.configuration, batch.result.tokens_per_s)

``load_profile``, ``load_plan`` and ``solve`` import no torch; ``Runner`` does, when opened.
The command line (``specplan.cli``) is built on these functions (docs/architecture.md).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from specplan.core.contract import load_plan_and_profile
from specplan.core.errors import PlanError, SpecplanError
from specplan.core.plan import Plan, load_plan
from specplan.core.profile import Profile, carried_part, load_profile, profile_to_dict
from specplan.core.prompts import Prompt
from specplan.core.quiet import quiet_import_noise
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.core.yamlio import file_sha256, mapping_sha256
from specplan.planner import PlanOptions, PlanResult, solve_plan
from specplan.planner.options import RUNTIME_MAX_STAGES, runtime_options
from specplan.planner.solve import plan_for_candidate

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from specplan.planner.predict import Prediction
    from specplan.planner.schedule import ScheduleResult
    from specplan.runtime.batcher import TogetherResult
    from specplan.runtime.runner import PlanRunner, RunResult

__all__ = ["Batch", "Runner", "Solution", "load_plan", "load_plan_and_profile", "load_profile", "predict", "solve",
           "solve_detailed", "solve_plan_file"]


@dataclass(frozen=True)
class Solution:
    """What :func:`solve_detailed` returns: the chosen ``plan`` and the planner's whole ``result``
    (every candidate, the LP check, the overall best when ``stages`` restricted the choice);
    :func:`solve_plan_file` adds ``schedule``, the per-batch schedule's result when the plan has one."""

    plan: Plan
    result: PlanResult
    schedule: "ScheduleResult | None" = None


def solve_detailed(profile: Profile, options: PlanOptions | None = None, *, stages: int | None = None,
                   profile_path: str | Path | None = None, profile_sha256: str | None = None) -> Solution:
    """Solve ``profile`` (docs/planner-math.md) for the fastest lossless plan.

    ``options`` default to what ``specplan plan`` uses (:func:`specplan.planner.options.runtime_options`, a lookup
    kept at a tie with plain decoding).
    ``stages``: take the best configuration with exactly that many stages instead of the overall best.
    ``profile_path``: recorded in the plan (as given) with the file's sha256, so that ``run`` can check
    the plan's contract; leave it out for a plan kept in memory. ``profile_sha256``: the profile file's
    hash when ``profile_path`` is recorded relative to somewhere else (the CLI records it relative to
    the plan's folder).
    """
    options = options or runtime_options(lookup_at_tie=True)
    if stages is not None and not 0 <= stages <= RUNTIME_MAX_STAGES:
        raise PlanError(f"--stages must be between 0 (plain decoding) and {RUNTIME_MAX_STAGES}")
    sha256 = profile_sha256
    if sha256 is None:
        sha256 = file_sha256(Path(profile_path)) if profile_path is not None and Path(profile_path).is_file() else ""
    result = solve_plan(profile, options, profile_path=str(profile_path or ""), profile_sha256=sha256)
    if stages is None:
        return Solution(result.plan, result)
    for candidate in result.candidates:
        if len(candidate.stages) == stages:
            return Solution(plan_for_candidate(result, candidate), result)
    raise PlanError(f"the profile allows no {stages}-stage configuration (a hierarchy needs acceptance entries "
                    "measured against a middle model: re-run `specplan profile` with a model drafter)")


def solve_plan_file(profile: Profile, profile_path: Path, plan_path: Path, options: PlanOptions, *,
                    stages: int | None = None, batches: tuple[int, ...] | None = None, adaptive: bool = False,
                    batched: bool = False) -> Solution:
    """What ``specplan plan`` writes to ``plan_path``: the solved plan (recording ``profile_path``
    relative to the plan's folder), with its schedule when the profile measured several batch sizes
    (or ``batches`` asks), made adaptive (``adaptive``), or solved only among one-stage configurations
    into the target (``batched``). Nothing is written or printed here."""
    from specplan.planner.adaptive_plan import make_adaptive
    from specplan.planner.batched_scope import batched_scope

    carried = profile_to_dict(carried_part(profile))  # what runs the plan without its profile file (core/contract.py)
    if batched:
        profile, options = batched_scope(profile, options)
    relative = os.path.relpath(profile_path.resolve(), plan_path.resolve().parent)
    solution = solve_detailed(profile, options, stages=stages, profile_path=relative,
                              profile_sha256=file_sha256(profile_path))
    plan, scheduled = _scheduled(solution.plan, profile, options, batches)
    if adaptive:
        plan = make_adaptive(plan, solution.result.candidates, profile)
    plan = replace(plan, carried_profile=carried, carried_sha256=mapping_sha256(carried))
    return Solution(plan, solution.result, scheduled)


def _scheduled(plan: Plan, profile: Profile, options: PlanOptions, batches: tuple[int, ...] | None):
    """(``plan`` with its schedule, the schedule's result) when the profile has T(n, b) at more than
    batch 1 or ``batches`` are asked; else (``plan``, None)."""
    from specplan.core.profile import batch_sizes
    from specplan.planner.schedule import with_schedule

    if batches is None and len(batch_sizes(profile)) < 2:
        return plan, None
    if batches is not None:
        check_batch_sizes(profile, batches)
    return with_schedule(plan, profile, options, batches)


def check_batch_sizes(profile: Profile, batches: tuple[int, ...]) -> None:
    """Refuse (one line) schedule batch sizes the profile did not measure."""
    from specplan.planner.batch import scheduled_batches

    try:
        scheduled_batches(profile, batches)
    except ValueError as error:
        raise SpecplanError(f"--batch-sizes: {error}; re-profile with `specplan profile --batch-sizes ...`") from None


def solve(profile: Profile, options: PlanOptions | None = None, *, stages: int | None = None,
          profile_path: str | Path | None = None) -> Plan:
    """The fastest lossless plan for ``profile`` (see :func:`solve_detailed`)."""
    return solve_detailed(profile, options, stages=stages, profile_path=profile_path).plan


@dataclass(frozen=True)
class Batch:
    """Prompts decoded together by :meth:`Runner.generate_batches`: their ``result`` (each prompt's, in
    prompt order), what a round plays with this many prompts in flight (``configuration``) and where that
    comes from (``source``), and the schedule's predicted goodput when its row is for exactly this batch."""

    prompts: tuple[Prompt, ...]
    prompt_ids: tuple[list[int], ...]
    result: "TogetherResult"
    source: str
    configuration: str
    predicted_tokens_per_s: float | None


def shared_sessions(plan: Plan, profile: Profile, parallel: int, threads: int, flag: str = "--parallel"):
    """The session source of ``parallel`` sequences decoded together (runtime/batcher.py: slots of a llama.cpp
    context, or rows of a torch batched cache); SpecplanError (one line, naming the command's ``flag``) for a
    plan that cannot: adaptive, or what its backend refuses (runtime/backends/)."""
    from specplan.runtime.backends import backend_for

    if parallel < 1:
        raise SpecplanError(f"{flag} {parallel}: pass at least 1")
    if plan.adaptive is not None:
        raise SpecplanError(f"{flag} {parallel} decodes sequences together with static plans; this plan is adaptive: "
                            f"pass {flag} 1, or re-plan without --adaptive")
    return backend_for(profile.backend).shared_sessions(plan, profile, parallel, threads, flag)


class Runner:
    """An opened plan: its models loaded, its contract checked, ready to generate.

    ``Runner.open(path)`` refuses a plan whose profile, device or target weights changed unless
    ``force``; ``runtime`` is ``eager``, ``static`` or ``compiled`` (docs/guide.md, "Fast
    forward passes"); by default the one the plan's profile measured, so the predictions hold.
    ``batch``: decode prompts that many at a time (:meth:`generate_batches`, docs/guide.md,
    "Batched runs"); batched forwards run eagerly unless ``runtime`` says otherwise.
    """

    def __init__(self, runner: "PlanRunner", batch: int | None = None):
        self._runner = runner
        self.batch = batch
        self._together: dict = {}  # generate_batches' engines, by the stages they run

    @classmethod
    def open(cls, plan: str | Path, *, runtime: str | RuntimeMode | None = None, force: bool = False,
             threads: int = 0, batch: int | None = None, fallback: bool = True, parallel: int = 1) -> "Runner":
        """Load the plan's models on its profile's backend (torch, or llama.cpp with ``threads``; 0: every core);
        ``fallback`` False plays the plan every round, even where plain decoding is measured cheaper
        (runtime/fallback.py); ``parallel``: requests a server decodes together (a static llama.cpp plan with
        fast numerics; :meth:`PlanRunner.slot_engines`, runtime/llama_cpp_shared.py)."""
        if threads < 0:
            raise SpecplanError(f"threads {threads}: pass at least 1, or 0 for every core")
        if batch is not None and batch < 1:
            raise SpecplanError(f"batch {batch}: pass at least 1")
        loaded_plan, profile, profile_path = load_plan_and_profile(str(plan))  # bad input fails before torch loads
        slots, flag = max(parallel, batch or 1), "--batch" if (batch or 1) > parallel else "--parallel"
        sessions = shared_sessions(loaded_plan, profile, slots, threads, flag) if slots > 1 else None
        mode = runtime if isinstance(runtime, RuntimeMode) or runtime is None else RuntimeMode(runtime)
        if mode is None and batch is not None:
            mode = EAGER
        quiet_import_noise()
        from specplan.runtime.runner import PlanRunner

        opened = PlanRunner.open(loaded_plan, profile, profile_path, force=force, runtime=mode, threads=threads,
                                 fallback=fallback, sessions=sessions)
        return cls(opened, batch)

    @property
    def plan(self) -> Plan:
        return self._runner.plan

    @property
    def profile(self) -> Profile:
        return self._runner.profile

    @property
    def plan_runner(self) -> "PlanRunner":
        """The runtime's runner underneath (for the bench and the profiler)."""
        return self._runner

    def generate(self, prompt: str | Prompt, *, max_new_tokens: int = 128, temperature: float | None = None,
                 top_p: float = 1.0, seed: int = 0, stream: bool = False, compare_plain: bool = False) -> "RunResult":
        """Decode ``prompt`` with the plan; temperature None = the plan's own. The output is the
        target's own (lossless); ``compare_plain`` also decodes plainly and compares."""
        if isinstance(prompt, str):
            if not prompt.strip():
                raise PlanError("the prompt is empty; give some text")
            prompt = Prompt("prompt", "prompt", prompt)
        if max_new_tokens < 1:
            raise PlanError("max_new_tokens must be at least 1")
        temperature = self._sampling(temperature, top_p)
        return self._runner.run_prompt(prompt, max_new_tokens, temperature, top_p, seed, stream=stream,
                                       compare_plain=compare_plain)

    def generate_batches(self, prompts: "Sequence[str | Prompt]", *, max_new_tokens: int = 128,
                         temperature: float | None = None, top_p: float = 1.0, seed: int = 0) -> "Iterator[Batch]":
        """Decode ``prompts`` ``batch`` at a time (in order), together: each prompt of a batch on an engine of
        its own in a thread of its own, their forwards batched (runtime/batcher.py), the engines those of the
        plan's schedule row for the batch's size (the plan's stages without a schedule), each round playing
        the row for the prompts then in flight (runtime/load_schedule.py), as ``specplan serve`` does
        (docs/guide.md, "Batched runs"); one :class:`Batch` as each finishes. Every prompt is checked to fit
        before the first batch decodes. ``temperature`` None: the plan's; prompt i samples with ``seed + i``."""
        from specplan.runtime.drafters.base import SamplingConfig

        temperature = self._sampling(temperature, top_p)
        prompts = [Prompt("prompt", "prompt", prompt) if isinstance(prompt, str) else prompt for prompt in prompts]
        prompt_ids = [self._runner.check_prompt(prompt, max_new_tokens) for prompt in prompts]
        size = self.batch or 1
        for start in range(0, len(prompts), size):
            chunk, ids = tuple(prompts[start:start + size]), tuple(prompt_ids[start:start + size])
            stages, source = self._stages_at(len(chunk))
            if stages not in self._together:
                self._together[stages] = self._runner.engines_together(size, stages)
            together = self._together[stages]
            samplings = [SamplingConfig(temperature, top_p, seed + start + index) for index in range(len(chunk))]
            result = together.generate(ids, max_new_tokens, samplings)
            choice = together.choice(len(chunk))
            if self.plan.schedule is None and choice.batch > 1:
                source = f"the schedule solved from the profile, its row for batch {choice.batch}"
            yield Batch(chunk, ids, result, source, choice.played, _scheduled_goodput(self.plan, len(chunk), stages))

    def _sampling(self, temperature: float | None, top_p: float) -> float:
        """The temperature to decode at (None: the plan's); PlanError (one line) on a bad one or a bad top_p."""
        temperature = self.plan.temperature if temperature is None else temperature
        if not (math.isfinite(temperature) and temperature >= 0):
            raise PlanError(f"temperature {temperature} must be a finite number >= 0")
        if not 0.0 < top_p <= 1.0:
            raise PlanError("top_p must be in (0, 1]")
        return temperature

    def _stages_at(self, batch: int) -> tuple[tuple, str]:
        """The stages whose engines decode ``batch`` prompts together, and where they come from."""
        if self.plan.schedule is None:
            return tuple(self.plan.stages), "the plan (no schedule)"
        row = self.plan.schedule.row_for(batch)
        return tuple(row.stages), f"the schedule's row for batch {row.batch}"

    def summary_line(self, result: "RunResult") -> str:
        return self._runner.summary_line(result)

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        return None


def _scheduled_goodput(plan: Plan, batch: int, stages: tuple) -> float | None:
    """The schedule's goodput for ``batch`` when the schedule's row for exactly that batch runs ``stages``."""
    if plan.schedule is None:
        return None
    row = plan.schedule.row_for(batch)
    return row.tokens_per_s if row.batch == batch and tuple(row.stages) == tuple(stages) else None


def predict(path: str | Path) -> "Prediction":
    """The roofline's and planner's prediction for one published-setting file (``specplan predict``).

    The file's SKU, shapes and precisions are looked up here (``planner/data/skus.yaml``,
    ``models/data/arch.yaml``); the model is :mod:`specplan.planner.predict` (docs/planner-math.md,
    section 13). Raises :class:`~specplan.core.errors.SettingError` with one line on a bad file.
    """
    from specplan.core.errors import ModelError, SettingError
    from specplan.core.published import load_setting
    from specplan.models.arch import shape_of_arch
    from specplan.planner.predict import PRECISION_KEYS, RoleModel, predict_setting
    from specplan.planner.hardware.roofline import PRECISIONS
    from specplan.planner.hardware.sku import load_skus

    setting = load_setting(path)
    skus = load_skus()
    if setting.sku not in skus:
        raise SettingError(f"{path}: sku {setting.sku!r} is not in the SKU table; use one of {', '.join(sorted(skus))}")

    def role(ref, where: str) -> RoleModel:
        if ref.kind == "ngram":
            return RoleModel(None, None)
        try:
            shape = shape_of_arch(ref.arch)
        except ModelError as exc:
            raise SettingError(f"{path}: {where}.arch: {exc}") from None
        return RoleModel(shape, PRECISIONS[PRECISION_KEYS[ref.precision]], ref.kind == "head")

    try:
        return predict_setting(setting, role(setting.target, "target"), role(setting.drafter, "drafter"),
                               skus[setting.sku])
    except ValueError as exc:
        raise SettingError(f"{path}: {exc}") from None
