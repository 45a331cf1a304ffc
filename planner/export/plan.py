"""Export a plan to a serving engine: re-solve under what the engine can express.

An engine runs a subset of the plan space (:mod:`.engines`): vLLM one drafter and a
chain; SGLang a chain or an EAGLE-2-style tree (steps x topk, a budget of draft tokens);
transformers a chain from an assistant model, prompt lookup or early exit; llama.cpp a
chain from a GGUF draft model or n-gram lookup; TensorRT-LLM a chain from prompt lookup or a draft
model, and a chain or a static tree from an EAGLE-3 head. ``export_plan`` solves the same profile twice:
unrestricted (every shape, hierarchies) and restricted to the engine (its drafters, its
shapes, one stage, its own limits such as SGLang's candidate bound), and prints the command
that starts the engine with the restricted optimum, with the predicted loss
``L_engine / L_unrestricted - 1`` in ms per token.

Drafters left out are kept in two lists: those the engine cannot run at all, and those it
could run but whose files specplan cannot write in the engine's format yet.

For SGLang trees the Sequoia DP tree (arXiv 2402.12374) with the same budget, depth and
widest branching stands in for SGLang's dynamic tree (EAGLE-2, arXiv 2406.16858): an
approximation, stated in the notes.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace

from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.errors import PlanError
from specplan.core.plan import Stage
from specplan.core.profile import Profile, keep_drafters

from .commands import render
from .engines import (ARTIFACT_GAP, ENGINES, STAND_IN_MARGIN, EngineSupport, sglang_candidates, sglang_fits,
                      tree_numbers)
from .models import ModelNames
from .notes import ENGINE_MEASURED, engine_notes
from ..options import PlanOptions
from ..solve import PlanResult, solve_plan


@dataclass(frozen=True)
class ExportResult:
    """The engine's command and what it costs against the unrestricted optimum."""

    engine: str
    config: str  # the command that starts the engine (transformers: a Python snippet)
    stage: Stage | None  # the exported stage (None: plain decoding, no speculation)
    restricted: PlanResult  # solved under the engine's limits
    unrestricted: PlanResult  # solved with every shape and hierarchy
    excluded: tuple[str, ...]  # drafters the engine cannot run, with the reason
    notes: tuple[str, ...] = ()
    unwritable: tuple[str, ...] = ()  # drafters the engine could run but specplan cannot write for it yet
    limits: tuple[str, ...] = ()  # the engine's own limits that changed the plan, each with its loss

    @property
    def loss(self) -> float:
        """Predicted slowdown of the engine's best plan, ms/token relative to the unrestricted one."""
        return self.restricted.plan.predicted.ms_per_token / self.unrestricted.plan.predicted.ms_per_token - 1.0


def engine_support(name: str) -> EngineSupport:
    """The engine called ``name``; PlanError listing the known ones otherwise."""
    if name not in ENGINES:
        raise PlanError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    return ENGINES[name]


def restrict_profile(profile: Profile, engine: EngineSupport,
                     names: ModelNames | None = None) -> tuple[Profile, tuple[str, ...], tuple[str, ...]]:
    """``profile`` with only the drafters ``engine`` can run (and their acceptance by the target).

    Returns the restricted profile, one line per drafter the engine cannot run, and one line per
    drafter it could run but specplan cannot write in its format yet.
    """
    target = profile.target.id
    excluded, unwritable, kept = [], [], {target}
    for drafter, source in _drafter_sources(profile):
        verdict = engine.judge(source, names)
        if verdict.runs:
            kept.add(drafter)
        else:
            (unwritable if verdict.gap == ARTIFACT_GAP else excluded).append(f"{drafter} ({source}): {verdict.reason}")
    return keep_drafters(profile, kept), tuple(excluded), tuple(unwritable)


def _solve_quietly(profile: Profile, options: PlanOptions, **where: str) -> PlanResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return solve_plan(profile, options, **where)


def _source(profile: Profile, drafter: str) -> str:
    model = profile.model(drafter)
    return model.source if model is not None else profile.retrieval_entry(drafter).source


def _last_stage(result: PlanResult) -> Stage | None:
    stages = result.plan.stages
    return stages[-1] if stages else None


def _sglang_bounded(profile: Profile, options: PlanOptions, result: PlanResult,
                    where: dict[str, str]) -> tuple[PlanResult, tuple[str, ...]]:
    """Re-solve with smaller budgets until SGLang can build the draft-model tree; the limit's line."""
    first, budget = result, options.max_budget
    while True:
        stage = _last_stage(result)
        if stage is None or stage.shape.kind != "tree" or _source(profile, stage.drafter).startswith("ngram:") \
                or sglang_fits(stage):
            break
        steps, topk, _ = tree_numbers(stage)
        budget = min(budget - 1, sglang_candidates(steps, topk) + 1)
        bounded = replace(options, max_budget=budget) if budget >= 2 else replace(options, shapes=("sequence",))
        result = _solve_quietly(profile, bounded, **where)
    if result is first:
        return result, ()
    steps, topk, tokens = tree_numbers(_last_stage(first))
    cost = result.plan.predicted.ms_per_token / first.plan.predicted.ms_per_token - 1.0
    return result, (f"SGLang drafts the best num_draft_tokens - 1 of topk + (steps - 1) * topk^2 scored candidates: "
                    f"the {tokens}-token tree ({steps} steps, topk {topk}) needs {tokens - 1} of "
                    f"{sglang_candidates(steps, topk)}, so it was re-solved within the bound: {cost:+.1%} ms/token",)


def _exact_unless_clearly_better(profile: Profile, engine: EngineSupport, options: PlanOptions, result: PlanResult,
                                 excluded: tuple[str, ...], where: dict[str, str]) -> tuple[PlanResult, tuple[str, ...]]:
    """Keep a stand-in drafter (run by a different method of the engine's, e.g. a cache drafter as vLLM's
    suffix decoding) only when it predicts STAND_IN_MARGIN fewer ms/token than the best drafter the engine
    runs as measured: its acceptance under the engine's method was never measured."""
    stage = _last_stage(result)
    if stage is None or parse_drafter_spec(_source(profile, stage.drafter)).kind not in engine.stand_ins:
        return result, excluded
    sources = _drafter_sources(profile)
    stand_ins = {drafter for drafter, source in sources if parse_drafter_spec(source).kind in engine.stand_ins}
    kept = {profile.target.id} | {drafter for drafter, _ in sources if drafter not in stand_ins}
    exact = _solve_quietly(keep_drafters(profile, kept), options, **where)
    if result.plan.predicted.ms_per_token < (1.0 - STAND_IN_MARGIN) * exact.plan.predicted.ms_per_token:
        return result, excluded
    return exact, excluded + tuple(f"{drafter}: {engine.name} would run it only through a different method (a stand-in), "
                                   f"which predicts under {STAND_IN_MARGIN:.0%} fewer ms/token than the best drafter "
                                   f"{engine.name} runs as measured" for drafter in sorted(stand_ins))


def _tree_drafters(profile: Profile, engine: EngineSupport) -> frozenset[str] | None:
    """The drafters ``engine`` drafts trees with (None: all of them); TensorRT-LLM's trees are EAGLE heads'."""
    if engine.tree_kinds is None:
        return None
    return frozenset(drafter for drafter, source in _drafter_sources(profile)
                     if parse_drafter_spec(source).kind in engine.tree_kinds)


def _drafter_sources(profile: Profile) -> list[tuple[str, str]]:
    """(drafter id, SPEC) of every drafter of the profile."""
    target = profile.target.id
    return [(m.id, m.source) for m in profile.models if m.id != target] + [(r.id, r.source) for r in profile.retrieval]


def export_plan(profile: Profile, engine_name: str, options: PlanOptions | None = None, *,
                profile_path: str = "", profile_sha256: str = "", names: ModelNames | None = None,
                unrestricted: PlanResult | None = None) -> ExportResult:
    """The best configuration ``engine_name`` can run for ``profile``, its command, and its loss.

    Parameters
    ----------
    profile : Profile
        The profile the plan was solved from (with a SKU's roofline latencies for SKU plans).
    engine_name : str
        ``vllm``, ``sglang``, ``transformers``, ``llama.cpp`` or ``tensorrt-llm``.
    options : PlanOptions, optional
        Limits of the unrestricted search (budget, depth, gammas, temperature); the engine's
        search uses the same limits with the engine's shapes and one stage.
    names : ModelNames, optional
        How the command names the models (default: from the profile's sources, see
        :mod:`.models`).
    unrestricted : PlanResult, optional
        ``solve_plan(profile, options)`` when the caller already has it (exporting one profile
        for every engine solves it once); solved here otherwise.

    Raises
    ------
    PlanError
        An unknown engine (the message lists the known ones).
    """
    engine = engine_support(engine_name)
    options = options or PlanOptions()
    names = names or ModelNames(profile.target.source, profile.device.kind)
    where = {"profile_path": profile_path, "profile_sha256": profile_sha256}
    unrestricted = unrestricted or _solve_quietly(profile, options, **where)
    if not math.isfinite(unrestricted.plan.predicted.ms_per_token):
        raise PlanError("the profile's target has no usable latency; re-run `specplan profile`")
    restricted_profile, excluded, unwritable = restrict_profile(profile, engine, names)
    engine_options = replace(options, shapes=tuple(s for s in options.shapes if s in engine.shapes) or ("sequence",),
                             max_stages=min(1, options.max_stages), tree_drafters=_tree_drafters(restricted_profile, engine))
    restricted = _solve_quietly(restricted_profile, engine_options, **where)
    restricted, excluded = _exact_unless_clearly_better(restricted_profile, engine, engine_options, restricted,
                                                        excluded, where)
    limits: tuple[str, ...] = ()
    if engine.name == "sglang":
        restricted, limits = _sglang_bounded(restricted_profile, engine_options, restricted, where)
    stage = _last_stage(restricted)
    source = _source(profile, stage.drafter) if stage else ""
    notes = engine_notes(engine.name, stage, source, names)
    if engine.name in (profile.engine, profile.device.source):  # T(n) of the engine's kernels (profile --engine, --backend)
        notes = (ENGINE_MEASURED.format(engine=engine.name),) + notes[1:]
    config = render(engine.name, stage, source, names)
    if engine.name == "llama.cpp" and profile.target.flash_attention == "off":
        config += " -fa off"  # the profile measured this target's plain tokens cheaper without it
    return ExportResult(engine.name, config, stage, restricted, unrestricted, excluded, notes, unwritable, limits)


def describe(result: ExportResult) -> list[str]:
    """Human-readable lines: the engine's plan, the unrestricted plan, the loss, exclusions."""
    engine, full = result.restricted.plan, result.unrestricted.plan
    lines = [
        f"{result.engine}: {engine.summary()}: {engine.predicted.ms_per_token:.3f} ms/token, "
        f"speedup {engine.predicted.speedup:.2f}x",
        f"unrestricted: {full.summary()}: {full.predicted.ms_per_token:.3f} ms/token, speedup {full.predicted.speedup:.2f}x",
        f"predicted loss: {result.loss:+.1%} ms/token ({engine.predicted.speedup:.2f}x instead of "
        f"{full.predicted.speedup:.2f}x)",
    ]
    lines += [f"engine limit: {line}" for line in result.limits]
    lines += [f"left out, the engine cannot run it: {line}" for line in result.excluded]
    lines += [f"left out, specplan cannot write it for {result.engine} yet: {line}" for line in result.unwritable]
    lines += [f"note: {line}" for line in result.notes]
    return lines
