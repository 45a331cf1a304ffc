"""Export a plan to a serving engine: re-solve under what the engine can express.

An engine runs a subset of the plan space (:mod:`.export_engines`): vLLM one drafter and a
chain; SGLang a chain or an EAGLE-2-style tree (steps x topk, a budget of draft tokens);
transformers a chain from an assistant model, prompt lookup or early exit; llama.cpp a
chain from a draft model or n-gram lookup. ``export_plan`` solves the same profile twice:
unrestricted (every shape, hierarchies) and restricted to the engine (its drafters, its
shapes, one stage), and reports the restricted optimum's configuration in the engine's own
terms with the predicted loss ``L_engine / L_unrestricted - 1`` in ms per token.

For SGLang trees the Sequoia DP tree (arXiv 2402.12374) with the same budget, depth and
widest branching stands in for SGLang's dynamic tree (EAGLE-2, arXiv 2406.16858): an
approximation, stated in the notes.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace

from specplan.core.errors import PlanError
from specplan.core.plan import Stage
from specplan.core.profile import Profile

from .export_engines import ENGINES, EngineSupport, render
from .options import PlanOptions
from .solve import PlanResult, solve_plan


@dataclass(frozen=True)
class ExportResult:
    """The engine's configuration and what it costs against the unrestricted optimum."""

    engine: str
    config: str  # the engine's own text: JSON or command-line flags
    stage: Stage | None  # the exported stage (None: plain decoding, no speculation)
    restricted: PlanResult  # solved under the engine's limits
    unrestricted: PlanResult  # solved with every shape and hierarchy
    excluded: tuple[str, ...]  # drafters the engine cannot express, with the reason
    notes: tuple[str, ...] = ()

    @property
    def loss(self) -> float:
        """Predicted slowdown of the engine's best plan, ms/token relative to the unrestricted one."""
        return self.restricted.plan.predicted.ms_per_token / self.unrestricted.plan.predicted.ms_per_token - 1.0


def engine_support(name: str) -> EngineSupport:
    """The engine called ``name``; PlanError listing the known ones otherwise."""
    if name not in ENGINES:
        raise PlanError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    return ENGINES[name]


def restrict_profile(profile: Profile, engine: EngineSupport) -> tuple[Profile, tuple[str, ...]]:
    """``profile`` with only the drafters ``engine`` can express (and their acceptance by the target).

    Returns the restricted profile and one line per drafter left out.
    """
    target = profile.target.id
    excluded, kept = [], {target}
    for drafter, source in [(m.id, m.source) for m in profile.models if m.id != target] + \
            [(r.id, r.source) for r in profile.retrieval]:
        ok, why = engine.expresses(source)
        if ok:
            kept.add(drafter)
        else:
            excluded.append(f"{drafter} ({source}): {why}")
    restricted = replace(
        profile,
        models=tuple(m for m in profile.models if m.id in kept),
        retrieval=tuple(r for r in profile.retrieval if r.id in kept),
        acceptance=tuple(a for a in profile.acceptance if a.drafter in kept and a.verifier == target),
    )
    return restricted, tuple(excluded)


def _solve_quietly(profile: Profile, options: PlanOptions, **where: str) -> PlanResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return solve_plan(profile, options, **where)


def _source(profile: Profile, drafter: str) -> str:
    model = profile.model(drafter)
    return model.source if model is not None else profile.retrieval_entry(drafter).source


def export_plan(profile: Profile, engine_name: str, options: PlanOptions | None = None, *,
                profile_path: str = "", profile_sha256: str = "") -> ExportResult:
    """The best configuration ``engine_name`` can run for ``profile``, and its loss.

    Parameters
    ----------
    profile : Profile
        The profile the plan was solved from (with a SKU's roofline latencies for SKU plans).
    engine_name : str
        ``vllm``, ``sglang``, ``transformers`` or ``llama.cpp``.
    options : PlanOptions, optional
        Limits of the unrestricted search (budget, depth, gammas, temperature); the engine's
        search uses the same limits with the engine's shapes and one stage.

    Raises
    ------
    PlanError
        An unknown engine (the message lists the known ones).
    """
    engine = engine_support(engine_name)
    options = options or PlanOptions()
    where = {"profile_path": profile_path, "profile_sha256": profile_sha256}
    unrestricted = _solve_quietly(profile, options, **where)
    restricted_profile, excluded = restrict_profile(profile, engine)
    engine_options = replace(options, shapes=tuple(s for s in options.shapes if s in engine.shapes) or ("sequence",),
                             max_stages=min(1, options.max_stages))
    restricted = _solve_quietly(restricted_profile, engine_options, **where)
    stages = restricted.plan.stages
    stage = stages[-1] if stages else None
    notes = []
    if stage is not None and stage.shape.kind == "tree":
        notes.append("SGLang grows its tree dynamically; the prediction is the static DP tree with the same "
                     "budget, depth and widest branching")
    if stage is None:
        notes.append(f"no drafter that {engine.name} can express beats plain decoding: serve without speculation")
    if stage is not None and engine.name == "llama.cpp" and _source(profile, stage.drafter).startswith("ngram:"):
        notes.append("llama.cpp's ngram-simple matches exactly size-n tokens (no fall-back to shorter n-grams "
                     "as measured), so its acceptance may be lower than predicted")
    if not math.isfinite(unrestricted.plan.predicted.ms_per_token):
        raise PlanError("the profile's target has no usable latency; re-run `specplan profile`")
    config = render(engine.name, stage, _source(profile, stage.drafter) if stage else "")
    return ExportResult(engine.name, config, stage, restricted, unrestricted, excluded, tuple(notes))


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
    lines += [f"left out: {line}" for line in result.excluded]
    lines += [f"note: {line}" for line in result.notes]
    return lines
