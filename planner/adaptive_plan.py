"""``specplan plan --adaptive``: the candidate configurations an adaptive plan may switch between
(docs/planner-math.md section 12.3, docs/guide.md "Adaptive plans").

Candidates are the solver's own rows (every top stage over its drafter's best sub-hierarchy,
the best chain of each length, plain decoding), one per *family* (drafter chain, stage kinds,
graft), best first, after the plan itself. Only families the runtime can run without loading
weights the plan does not already load are kept: retrieval drafters, layer-skip views of the
target (they share its weights), and the models the plan's own stages name. Plain decoding is
always a candidate (the floor when nothing drafts well).
"""

from __future__ import annotations

from dataclasses import replace

from specplan.core.plan import Plan, Stage
from specplan.core.plan_adaptive import AdaptiveCandidate, AdaptiveSettings
from specplan.core.profile import Profile

from .solve import Candidate

DEFAULT_CANDIDATES = 8


def family(stages: tuple[Stage, ...]) -> tuple:
    """What a re-solve keeps of a configuration: each stage's drafter, verifier, kind and graft."""
    return tuple((s.drafter, s.verifier, s.shape.kind, s.shape.graft) for s in stages)


def _loaded(plan: Plan, profile: Profile) -> set[str]:
    """Ids the runtime can run at no extra weights: the plan's models, retrieval drafters, layer-skip views."""
    ids = {plan.target} | {entry.id for entry in profile.retrieval}
    ids |= {model.id for model in profile.models if model.source.startswith("layerskip:")}
    for stage in plan.stages:
        ids |= {stage.drafter, stage.verifier, stage.shape.graft} - {""}
    return ids


def adaptive_candidates(plan: Plan, rows: tuple[Candidate, ...], profile: Profile,
                        limit: int = DEFAULT_CANDIDATES) -> tuple[AdaptiveCandidate, ...]:
    """The plan first, then the best row of each runnable family, plain decoding always included.

    >>> from specplan.core.plan import Prediction
    >>> from specplan.core.profile import DeviceInfo, ModelEntry, Profile
    >>> profile = Profile(DeviceInfo("cpu", "", "cpu"), (ModelEntry("t", "x", "", role="target"),), ())
    >>> plan = Plan("p", "", {}, "t", 0.0, (), Prediction(10.0, 100.0, 1.0, 1.0))
    >>> [c.stages for c in adaptive_candidates(plan, (Candidate("t plain decoding", 0, 10, 1, 10),), profile)]
    [()]
    """
    loaded = _loaded(plan, profile)
    chosen = [AdaptiveCandidate(plan.stages, plan.predicted.ms_per_token)]
    seen = {family(plan.stages)}
    plain = next((row for row in rows if not row.stages), None)
    for row in rows:
        names = {name for stage in row.stages for name in (stage.drafter, stage.verifier, stage.shape.graft)} - {""}
        if family(row.stages) in seen or not names <= loaded:
            continue
        if len(chosen) == limit - (plain is not None and () not in seen):
            break
        seen.add(family(row.stages))
        chosen.append(AdaptiveCandidate(row.stages, row.ms_per_token))
    if plain is not None and () not in seen:
        chosen.append(AdaptiveCandidate((), plain.ms_per_token))
    return tuple(chosen)


def make_adaptive(plan: Plan, rows: tuple[Candidate, ...], profile: Profile, limit: int = DEFAULT_CANDIDATES,
                  every: int = 16) -> Plan:
    """``plan`` with an ``adaptive`` section over :func:`adaptive_candidates` (default rule settings)."""
    return replace(plan, adaptive=AdaptiveSettings(adaptive_candidates(plan, rows, profile, limit), every=every))
