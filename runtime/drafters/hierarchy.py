"""A middle model of a hierarchy as a sequence drafter for the stage above.

Hierarchical speculative decoding (HSD, Mohri et al., arXiv 2510.19705; SpecMQuant, arXiv
2505.22179, tree -> sequence before a 4-bit target): the middle model verifies the stage
below it (a tree or a chain from a cheaper drafter) round after round, accumulating its
committed tokens until the plan's gamma; that sequence is the draft the stage above verifies.

Overshoot (docs/planner-math.md section 4): every middle round's draft is capped so that its
accepted path cannot commit more than the tokens still wanted, so a request for gamma tokens
returns exactly gamma (fewer only at an end-of-sequence token). In tokens this equals the
plan's ``trim`` rule (the tokens kept are the same), and it never verifies nodes that would
be trimmed.

Lossless: each middle round is lossless for the middle model, so the returned tokens are
distributed as the middle model's own autoregressive samples; when sampling, the middle's
distribution rows at those positions are returned as ``draft_probs`` and the stage above
applies the usual rejection rule (the same rule at each level). The draft length is fixed
(gamma) or stops at EOS, a decision on the drafted tokens alone, so it does not bias them.
"""

from __future__ import annotations

import torch

from specplan.runtime.commit import Committed
from specplan.runtime.drafters.base import Drafter, Proposal, SamplingConfig
from specplan.runtime.stage import StageRunner, StageStats


class HierarchyDrafter(Drafter):
    """Drafts for the stage above by running ``stage`` (whose verifier is the middle model)."""

    def __init__(self, name: str, stage: StageRunner, eos_ids: set[int] = frozenset()):
        self.name = name
        self.stage = stage
        self.eos_ids = set(eos_ids)
        self.stats: list[StageStats] = []

    def reset(self) -> None:
        self.stage.reset()  # resets the drafter below, and so a nested hierarchy's totals
        self.stats = [self.stage.new_stats()]

    def stage_stats(self) -> list[StageStats]:
        """Totals of every stage at or below this middle model, bottom first."""
        return self.stage.drafter.stage_stats() + self.stats

    def sessions(self) -> list:
        """Every model session at or below this middle model (the bench times their forwards)."""
        return self.stage.drafter.sessions() + [self.stage.verifier]

    def drafters(self) -> list[Drafter]:
        return [self, *self.stage.drafter.drafters()]

    def propose(self, committed: list[int], gamma: int, sampling: SamplingConfig, generator: torch.Generator) -> Proposal:
        """Exactly ``gamma`` tokens of the middle model continuing ``committed`` (fewer after an EOS)."""
        if not self.stats:
            self.stats = [self.stage.new_stats()]
        self.stage.catch_up(committed, fold=True)  # the missing draft token joins the next verify
        draft = Committed(committed, gamma, self.eos_ids)
        rows: list[torch.Tensor] = []
        want_probs = not sampling.greedy
        while draft.remaining > 0 and not draft.done:
            result = self.stage.play(draft.context, draft.remaining, sampling, generator, want_probs)
            self.stats[0].add(result)
            chunk = draft.add(result.chunk)
            if result.verifier_probs is not None:
                rows.append(result.verifier_probs[: len(chunk)])
        return Proposal(tuple(draft.new), torch.cat(rows) if rows else None)
