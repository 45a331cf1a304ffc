"""What the batched runtime runs (docs/guide.md, "Batched runs"): plain decoding, one sequence
stage into the target drafted by an n-gram lookup or a drafter model (``model:``,
``layerskip:``), or one tree stage into the target grown by a retrieval drafter (``ngram:N``,
``recycle``, ``cache``; runtime/batched/tree.py). ``specplan plan --batched`` solves, per batch
size, only among those, so that ``run --batch`` and ``bench --batch`` execute the schedule's
choice at every batch."""

from __future__ import annotations

from dataclasses import replace

from specplan.core.profile import Profile
from specplan.planner.options import PlanOptions

SEQUENCE_KINDS = ("ngram", "model", "layerskip")  # sequence drafters runtime/batched/drafters.py runs
TREE_KINDS = ("ngram", "recycle", "cache")  # tree drafters runtime/batched/tree.py runs (retrieval)


def batched_drafter(source: str) -> bool:
    """Whether a drafter of spec ``source`` (``ngram:5``, ``layerskip:20``, ``recycle``...) runs batched.

    >>> [batched_drafter(s) for s in ("ngram:5", "layerskip:20", "model:qwen2.5-coder-0.5b", "recycle", "head:d")]
    [True, True, True, True, False]
    """
    return batched_trees(source) or (source.split(":", 1)[0] in SEQUENCE_KINDS and ":" in source)


def batched_trees(source: str) -> bool:
    """Whether a drafter of spec ``source`` grows trees in the batched runtime (a retrieval drafter).

    >>> [batched_trees(s) for s in ("ngram:5", "recycle", "cache", "layerskip:20")]
    [True, True, True, False]
    """
    kind = source.split(":", 1)[0]
    return kind in TREE_KINDS and (kind != "ngram" or ":" in source)


def batched_scope(profile: Profile, options: PlanOptions) -> tuple[Profile, PlanOptions]:
    """``profile`` with only the drafters the batched runtime runs, and ``options`` restricted to
    one stage into the target, trees grown only by retrieval drafters (a drafter model's stage
    stays a sequence: the batched runtime grows trees from retrieval drafters only)."""
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
