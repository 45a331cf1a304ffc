"""The speculative decoding loop for one stage (drafter -> target), and plain decoding.

Invariant: the target's cache holds every committed token but the last (the *root* of the
next draft). Each round: the drafter proposes up to gamma tokens continuing the committed
text; the target runs one forward over [root, draft...]; verification (greedy, or lossless
rejection sampling) accepts a prefix and yields the bonus token; the cache keeps the root
and the accepted tokens. Leviathan et al., arXiv 2211.17192; Chen et al., arXiv 2302.01318.

A tree stage (SpecInfer, arXiv 2305.09781; Sequoia, arXiv 2402.12374; EAGLE-2, arXiv
2406.16858) is the same round with a draft tree: one target forward over every node with
the tree attention mask, greedy or multi-candidate rejection-sampling verification over the
tree, and the cache compacted to the root and the accepted path (``Session.keep``).
Drafters that define ``observe(tokens, logits)`` (Token Recycling) see every target forward.
A hierarchy (HSD, arXiv 2510.19705) is the same loop whose drafter is a middle model's own
stage (:class:`~specplan.runtime.drafters.hierarchy.HierarchyDrafter`); the rounds themselves
live in :mod:`specplan.runtime.stage`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specplan.core.plan import StageShape
from specplan.runtime.drafters.base import Drafter, SamplingConfig
from specplan.runtime.drafters.ngram import NgramDrafter
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.runtime.session import as_session
from specplan.runtime.backend import Session
from specplan.runtime.commit import Committed
from specplan.runtime.fallback import ChainGrowth, FallbackGuard
from specplan.runtime.load_schedule import LoadSchedule
from specplan.runtime.match_gate import MatchGate
from specplan.runtime.stage import StageRunner, StageStats
from specplan.runtime.timing import now


@dataclass(frozen=True)
class GenerationResult:
    token_ids: tuple[int, ...]  # [new_tokens] generated ids, EOS included when it stopped there
    seconds: float  # wall time, prefill included
    target_forwards: int  # verify forwards of the target (prefill excluded)
    committed_per_forward: tuple[int, ...]  # tokens committed by each target forward, bonus included
    draft_seconds: float
    verify_seconds: float
    stop_reason: str  # eos | max_new_tokens
    stages: tuple[StageStats, ...] = ()  # per-stage totals, bottom stage first, the target's last
    plain_rounds: int = 0  # rounds the fallback guard played as plain decoding (runtime/fallback.py)
    fallbacks: int = 0  # times the guard left the plan for plain decoding
    cached_tokens: int = 0  # prompt tokens the target's cache kept from the last request (generate's keep_cache)
    first_seconds: float = 0.0  # wall time to the first round's commit, the prefill included
    first_tokens: int = 0  # what the first round committed (its accepted draft and bonus)

    @property
    def mean_accepted(self) -> float:
        """Committed tokens per target forward, bonus included (Spec-Bench's definition)."""
        return sum(self.committed_per_forward) / max(1, len(self.committed_per_forward))

    @property
    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.seconds if self.seconds > 0 else 0.0


class SpeculativeEngine:
    """Runs plain decoding (no drafter), one sequence stage drafter -> target (``gamma``), or
    one tree stage (``tree``: a StageShape, with a Drafter). A drafter that is itself a
    hierarchy (``stage_stats``) reports the totals of the stages below the target."""

    def __init__(self, target: "torch.nn.Module | Session", device: torch.device, eos_ids: set[int],
                 drafter: Drafter | Drafter | None = None, gamma: int = 0, tree: StageShape | None = None,
                 names: tuple[str, str] = ("none", "target"), runtime: RuntimeMode = EAGER,
                 guard: FallbackGuard | None = None, verify_ms: Callable[[int], float] | None = None,
                 fixed_chain: bool = False):
        self.target = as_session(target, device, runtime)
        self.device = device
        self.drafter = drafter
        self.stage = StageRunner(self.target, drafter, gamma, tree, names)
        self.gamma = self.stage.gamma
        self.tree = self.stage.tree
        self.eos_ids = set(eos_ids)
        # speculation that stops paying stops (runtime/fallback.py); plain decoding needs no guard
        speculates = drafter is not None and (self.gamma > 0 or self.tree is not None)
        self.guard = guard if speculates else None
        self.names = names
        self.plain_stage = StageRunner(self.target, None, 0, None, ("none", names[1])) if self.guard else None
        self.load: LoadSchedule | None = None  # the schedule row per requests decoding together (set by serve)
        # a schedule row of other stages: built over this engine's target session the first time it plays
        self.row_builder: Callable[[tuple], StageRunner] | None = None
        self.row_stages: dict[tuple, StageRunner] = {}
        # a chain that costs no model changes length with its acceptance (ChainGrowth) unless fixed_chain
        lookup = self.guard is not None and self.tree is None and not drafter.sessions() and not fixed_chain
        self.growth = ChainGrowth(self.gamma, verify_ms=verify_ms) if lookup else None  # verify_ms: the target's T(n)
        if lookup and verify_ms is not None and isinstance(drafter, NgramDrafter):  # runtime/match_gate.py
            drafter.gate = MatchGate(self.gamma, verify_ms, longest=self.growth.reach)  # copies priced as they grow

    def _next_round(self) -> tuple[str, int | None, StageRunner | None]:
        """Who plays the next round: ``"load"`` (plain decoding, as the schedule row for the requests
        decoding together says: runtime/load_schedule.py), else the guard's ``"plan"`` or ``"plain"``
        (runtime/fallback.py); the chain length the row sets for the plan (None: the plan's own, or
        chain growth's); and the stage of a row of other stages that plays in the plan's place (None: the
        plan's). A load's plain rounds do not count in the guard's costs; a row's rounds count as the plan's."""
        choice = self.load.choice() if self.load is not None else None
        if choice is not None and choice.plain:
            return "load", None, None
        played = self.guard.choose() if self.guard is not None else "plan"
        if choice is None or played != "plan":
            return played, None, None
        return played, choice.gamma, self._row(choice.stages) if choice.stages else None

    def _row(self, stages: tuple) -> StageRunner | None:
        """The stage of a schedule row of other stages, over this engine's target session (None: no builder)."""
        if stages not in self.row_stages and self.row_builder is not None:
            self.row_stages[stages] = self.row_builder(stages)
        return self.row_stages.get(stages)

    def _plain(self) -> StageRunner:
        if self.plain_stage is None:
            self.plain_stage = StageRunner(self.target, None, 0, None, ("none", self.names[1]))
        return self.plain_stage

    def _stage_stats(self, top: StageStats) -> tuple[StageStats, ...]:
        return tuple(self.drafter.stage_stats() if self.drafter is not None else []) + (top,)

    def generate(self, prompt_ids: list[int], max_new_tokens: int, sampling: SamplingConfig,
                 on_commit: Callable[[list[int]], bool | None] | None = None,
                 keep_cache: bool = False) -> GenerationResult:
        """Decode up to ``max_new_tokens`` after ``prompt_ids``. ``on_commit(chunk)`` sees each round's
        committed tokens; True from it ends the request. ``keep_cache``: the target's cache keeps the
        prefix this prompt shares with the last request's text (a prompt cache: the prefill computes
        the rest), unless the drafter reads the target's rows, which the prefill must then produce."""
        generator = torch.Generator().manual_seed(sampling.seed)
        keep = keep_cache and not self.stage.rows_watched
        self.stage.reset(keep_cache=keep)
        for row in self.row_stages.values():
            row.reset(keep_cache=True)  # its drafter's state only: the session is the plan stage's
        stats = self.stage.new_stats()
        text = Committed(prompt_ids, max_new_tokens, self.eos_ids)
        start = now(self.device)
        cached = len(text.context) - len(self.target.rewind_to(text.context)) if keep else 0
        self.stage.catch_up(text.context)  # prefill (of what the cache lacks)
        guard, growth = self.guard, self.growth
        first_seconds, first_tokens = 0.0, 0
        if growth is not None:
            growth.start()
        if guard is not None:
            guard.start(chain=growth.base if growth is not None else None)  # a lookup chain it may shorten
        while text.remaining > 0 and not text.done:
            played, gamma, row = self._next_round()
            stage = row or (self.stage if played == "plan" else self._plain())
            if played == "plan" and row is None:
                if growth is not None and guard.cap is not None and guard.cap < growth.floor:
                    growth.shorten(guard.cap)  # the guard's shorter chain (runtime/fallback.py)
                stage.gamma = gamma if gamma is not None else growth.gamma if growth is not None else self.gamma
            result = stage.play(text.context, text.remaining, sampling, generator)
            stats.add(result)
            if guard is not None and played != "load":
                guard.record(played, result.draft_seconds + result.verify_seconds, len(result.chunk),
                             result.drafted + 1, result.verify_seconds)
            if growth is not None and played == "plan" and gamma is None and row is None:
                growth.record(result.drafted, len(result.chunk))
            chunk = text.add(result.chunk)
            if not first_tokens:
                first_seconds, first_tokens = now(self.device) - start, len(chunk)
            if on_commit is not None and on_commit(chunk):  # True: the caller ends the request here
                text.stop()
        seconds = now(self.device) - start
        return GenerationResult(tuple(text.new), seconds, len(text.per_forward), tuple(text.per_forward),
                                stats.draft_seconds, stats.verify_seconds, text.stop_reason or "max_new_tokens",
                                self._stage_stats(stats), guard.plain_rounds if guard else 0,
                                guard.switches if guard else 0, cached, first_seconds, first_tokens)
