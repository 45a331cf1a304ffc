"""What the batched runtime runs (docs/guide.md, "Batched runs"): plain decoding or one sequence
stage into the target, drafted by an n-gram lookup or a drafter model (``model:``,
``layerskip:``). ``specplan plan --batched`` solves, per batch size, only among those, so that
``run --batch`` and ``bench --batch`` execute the schedule's choice at every batch."""

from __future__ import annotations

from dataclasses import replace

from specplan.core.profile import Profile
from specplan.planner.options import PlanOptions

BATCHED_KINDS = ("ngram", "model", "layerskip")  # drafter spec kinds runtime/batched_drafters.py runs


def batched_drafter(source: str) -> bool:
    """Whether a drafter of spec ``source`` (``ngram:5``, ``layerskip:20``, ``recycle``...) runs batched.

    >>> [batched_drafter(s) for s in ("ngram:5", "layerskip:20", "model:qwen2.5-coder-0.5b", "recycle", "head:d")]
    [True, True, True, False, False]
    """
    return source.split(":", 1)[0] in BATCHED_KINDS and ":" in source


def batched_scope(profile: Profile, options: PlanOptions) -> tuple[Profile, PlanOptions]:
    """``profile`` with only the drafters the batched runtime runs, and ``options`` restricted to
    one sequence stage into the target."""
    target = profile.target.id
    kept = {target} | {m.id for m in profile.models if m.id != target and batched_drafter(m.source)} | \
        {r.id for r in profile.retrieval if batched_drafter(r.source)}
    scoped = replace(
        profile,
        models=tuple(m for m in profile.models if m.id in kept or m.role == "variant"),
        retrieval=tuple(r for r in profile.retrieval if r.id in kept),
        acceptance=tuple(a for a in profile.acceptance if a.drafter in kept and a.verifier == target),
    )
    return scoped, replace(options, shapes=("sequence",), max_stages=1)
