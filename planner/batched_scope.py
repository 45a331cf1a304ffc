"""One-stage configurations into the target (docs/guide.md, "Batched runs"; planner-math.md section
11.2): plain decoding, one sequence stage drafted by an n-gram lookup or a drafter model (``model:``,
``layerskip:``), or one tree stage grown by a retrieval drafter (``ngram:N``, ``recycle``, ``cache``).
``specplan plan --batched`` solves, per batch size, only among those, whose rows the plan's engines can
more often play by load (runtime/load_schedule.py: the plan, plain decoding, the plan's chain at
another length)."""

from __future__ import annotations

from dataclasses import replace

from specplan.core.profile import Profile
from specplan.planner.options import PlanOptions

SEQUENCE_KINDS = ("ngram", "model", "layerskip")  # drafters of a sequence stage in the scope
TREE_KINDS = ("ngram", "recycle", "cache")  # drafters of a tree stage in the scope (retrieval)


def batched_drafter(source: str) -> bool:
    """Whether a drafter of spec ``source`` (``ngram:5``, ``layerskip:20``, ``recycle``...) is in the scope.

    >>> [batched_drafter(s) for s in ("ngram:5", "layerskip:20", "model:qwen2.5-coder-0.5b", "recycle", "head:d")]
    [True, True, True, True, False]
    """
    return batched_trees(source) or (source.split(":", 1)[0] in SEQUENCE_KINDS and ":" in source)


def batched_trees(source: str) -> bool:
    """Whether a drafter of spec ``source`` grows trees in the scope (a retrieval drafter).

    >>> [batched_trees(s) for s in ("ngram:5", "recycle", "cache", "layerskip:20")]
    [True, True, True, False]
    """
    kind = source.split(":", 1)[0]
    return kind in TREE_KINDS and (kind != "ngram" or ":" in source)


def batched_scope(profile: Profile, options: PlanOptions) -> tuple[Profile, PlanOptions]:
    """``profile`` with only the scope's drafters, and ``options`` restricted to one stage into the target,
    trees grown only by retrieval drafters (a drafter model's stage stays a sequence)."""
    target = profile.target.id
    kept = {target} | {m.id for m in profile.models if m.id != target and batched_drafter(m.source)} | \
        {r.id for r in profile.retrieval if batched_drafter(r.source)}
    trees = {r.id for r in profile.retrieval if batched_trees(r.source)}
    scoped = replace(
        profile,
        models=tuple(m for m in profile.models if m.id in kept or m.role == "variant"),
        retrieval=tuple(r for r in profile.retrieval if r.id in kept),
        acceptance=tuple(a for a in profile.acceptance if a.drafter in kept and a.verifier == target),
    )
    return scoped, replace(options, max_stages=1, tree_drafters=frozenset(trees))
