"""The spread of a plan's prediction over the prompts it was calibrated on (docs/planner-math.md
section 9.2).

A prediction pools every calibration prompt's rounds, and a plan that copies long stretches on some
prompts and nothing on others predicts their mean. How far that mean could move with other prompts
of the same kind is what a user needs before trusting a margin of a few percent. The profile keeps
each prompt's counts (``AcceptanceEntry.per_prompt``); this module draws the prompts with
replacement (Efron's bootstrap, 1979), pools each draw's counts as the profiler pooled all of them
(core/prompt_counts.py), re-costs the plan's own stages on each draw by the closed form
(planner/recheck.py) and reports the central ``level`` share of the speedups over the floor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from specplan.core.errors import PlanError
from specplan.core.plan import Plan
from specplan.core.profile import AcceptanceEntry, Profile
from specplan.core.prompt_counts import PromptCounts, entry_from_totals

from .recheck import recost

RESAMPLES = 200  # draws of the calibration prompts: quantiles at 5% / 95% move by about 0.01x between seeds
LEVEL = 0.90  # the central share of the draws reported


@dataclass(frozen=True)
class PromptSpread:
    """The plan's speedup over the floor on ``prompts``-prompt draws of its calibration prompts:
    ``low`` and ``high`` bound the central ``level`` share of them."""

    prompts: int
    level: float
    low: float
    high: float

    def as_record(self) -> dict:
        return {"prompts": self.prompts, "level": self.level, "speedup": [round(self.low, 4), round(self.high, 4)]}


def prompt_spread(plan: Plan, profile: Profile, floor_ms: float, *, resamples: int = RESAMPLES, level: float = LEVEL,
                  seed: int = 0) -> PromptSpread | None:
    """The spread of ``plan``'s speedup over ``floor_ms`` across draws of its calibration prompts; None
    where it cannot be drawn: plain decoding, a tree grown at run time (no closed form), or an
    acceptance entry the plan reads that kept no per-prompt counts (a profile from before they were
    kept) or counted other prompts than the rest."""
    read = {(stage.drafter, stage.verifier) for stage in plan.stages}
    entries = [profile.acceptance_for(drafter, verifier, plan.temperature) for drafter, verifier in read]
    counts = {len(entry.per_prompt) if entry is not None else 0 for entry in entries}
    if len(counts) != 1 or 0 in counts or recost(plan, profile) is None:
        return None
    prompts = counts.pop()
    tables = {id(entry): _count_tables(entry) for entry in entries}
    generator = np.random.default_rng(seed)
    speedups = []
    for _ in range(resamples):
        weights = np.bincount(generator.integers(0, prompts, size=prompts), minlength=prompts)
        acceptance = tuple(_drawn(entry, tables[id(entry)], weights) if id(entry) in tables else entry
                           for entry in profile.acceptance)
        try:
            ms = recost(plan, replace(profile, acceptance=acceptance))
        except PlanError:  # a draw of prompts where the drafter had no round to count
            continue
        speedups.append(floor_ms / ms if ms and ms > 0 else 0.0)
    if len(speedups) < resamples / 2:
        return None
    low, high = np.quantile(speedups, [(1.0 - level) / 2, (1.0 + level) / 2])
    return PromptSpread(prompts, level, float(low), float(high))


def _count_tables(entry: AcceptanceEntry) -> tuple[np.ndarray, ...]:
    """The entry's per-prompt counts as one [prompts, length] table per kind, and the positions."""
    def table(lists, length: int) -> np.ndarray:
        rows = np.zeros((len(lists), length), dtype=np.int64)
        for row, counts in enumerate(lists):
            rows[row, :len(counts)] = counts
        return rows

    per_prompt, length = entry.per_prompt, entry.gamma + 1
    return (table([c.hist for c in per_prompt], length), table([c.censored for c in per_prompt], length),
            table([c.drafted_hist for c in per_prompt], length),
            table([c.rank_hits for c in per_prompt], len(entry.rank_accept)),
            np.array([c.positions for c in per_prompt], dtype=np.int64))


def _drawn(entry: AcceptanceEntry, tables: tuple[np.ndarray, ...], weights: np.ndarray) -> AcceptanceEntry:
    """The entry pooled over a draw that took prompt i ``weights[i]`` times (core/prompt_counts.py)."""
    hist, censored, drafted, ranks, positions = (weights @ table for table in tables)
    totals = PromptCounts(tuple(hist.tolist()), tuple(censored.tolist()), tuple(drafted.tolist()),
                          tuple(ranks.tolist()), int(positions))
    return entry_from_totals(entry, totals)
