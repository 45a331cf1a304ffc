"""The closed-loop engine: an adaptive plan's candidates share one target session, and the stage
configuration is re-solved from the request's live acceptance between rounds
(docs/planner-math.md section 12; SmartSpec, arXiv 2406.14066, chooses a draft length per request
from observed acceptance; EAGLE-2, arXiv 2406.16858, and DySpec, arXiv 2410.11744, adapt a tree
inside a round; here the whole configuration, drafter, shape and hierarchy, is re-solved).

Lossless: every round is one of the ordinary stage rounds (:mod:`specplan.runtime.stage`), each
lossless for the target whatever drafter proposed (section 5), and the target's cache invariant
(every committed token but the last) holds after every round, so the next round may be played
by any configuration. Which configuration plays round k is a function of the tokens committed
before it only (the scores and the posterior are computed from them), never of round k's draft
or coin flips: so greedy output is the target's own greedy decoding, and sampled output is
distributed as the target's (the choice is a stopping rule on the past, and each round's
output given the past is the target's conditional).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from specplan.core.plan import Stage
from specplan.core.plan_adaptive import AdaptiveSettings
from specplan.planner.posterior import posterior_alpha, posterior_entry
from specplan.planner.replan import Replanner
from specplan.core.plan import describe_stages
from specplan.runtime.commit import Committed
from specplan.runtime.drafters.base import Drafter, SamplingConfig
from specplan.runtime.engine import GenerationResult
from specplan.runtime.live_acceptance import ROW_TOP, LiveAcceptance
from specplan.runtime.session import ModelSession
from specplan.runtime.stage import StageRunner, StageStats
from specplan.runtime.timing import now
from specplan.runtime.top_k import top_rows

# The live scores are brought up to date every SCORE_EVERY rounds (and before any re-plan or forced
# switch), so that the forwards' rows are reduced in one top-k call and the replays run in one go:
# the posterior the re-plan trigger watches is then at most SCORE_EVERY - 1 rounds old
# (docs/planner-math.md section 12.2). A forward of more than UNREAD_ROWS tokens (a prefill) is
# read at once rather than held.
SCORE_EVERY = 4
UNREAD_ROWS = 32

# A switching rule for tests and measurements: (round index, committed tokens) -> candidate index
# to play the round with, or None to keep the re-planner's choice.
Policy = Callable[[int, list[int]], "int | None"]


@dataclass(frozen=True)
class ConfigurationUse:
    """One configuration a request ran: its stages, the rounds it played and the tokens they committed."""

    summary: str
    stages: tuple[Stage, ...]
    rounds: int
    tokens: int

    def as_record(self) -> dict:
        return {"configuration": self.summary, "rounds": self.rounds, "tokens": self.tokens}


@dataclass(frozen=True)
class AdaptiveResult(GenerationResult):
    """A generation by an adaptive plan: also which configurations ran, how often it switched,
    and the seconds spent scoring and re-planning (``adaptive_seconds``, inside ``seconds``: reading
    the target's forwards for the scores, and the work between rounds)."""

    configurations: tuple[ConfigurationUse, ...] = ()
    switches: int = 0
    replans: int = 0
    adaptive_seconds: float = 0.0
    reading_seconds: float = 0.0  # the part of adaptive_seconds spent reading target forwards' rows


class Family:
    """One candidate family: its drafter (built once) and a StageRunner per shape the re-solve picks."""

    def __init__(self, target: ModelSession, drafter: Drafter | None, make_runner: Callable[[Stage | None], StageRunner],
                 one_stage: bool = True):
        self.drafter = drafter
        self.one_stage = one_stage  # its drafter is verified by the target itself
        self.make_runner = make_runner
        self.runners: dict[Stage | None, StageRunner] = {}
        self.target = target

    def runner(self, stages: tuple[Stage, ...]) -> StageRunner:
        top = stages[-1] if stages else None  # None: plain decoding
        if top not in self.runners:
            self.runners[top] = self.make_runner(top)
        return self.runners[top]


class CandidateDrafters(Drafter):
    """Every candidate's drafter as one (the bench records their sessions; ``reset`` resets all)."""

    name = "adaptive"

    def __init__(self, drafters: list[Drafter]):
        self.members = drafters

    def reset(self) -> None:
        for drafter in self.members:
            drafter.reset()

    def sessions(self) -> list[ModelSession]:
        seen, result = set(), []
        for drafter in self.members:
            for session in drafter.sessions():
                if id(session) not in seen:
                    seen.add(id(session))
                    result.append(session)
        return result

    def drafters(self) -> list[Drafter]:
        return [self, *(inner for drafter in self.members for inner in drafter.drafters())]


class AdaptiveEngine:
    """Runs an adaptive plan: ``families[i]`` plays candidate i of ``settings``; ``live`` scores the
    drafters on the committed tokens; ``replanner`` re-solves; ``policy`` (tests) forces a choice."""

    def __init__(self, target: ModelSession, device: torch.device, eos_ids: set[int], families: list[Family],
                 settings: AdaptiveSettings, replanner: Replanner, live: LiveAcceptance, policy: Policy | None = None):
        self.target = target
        self.device = device
        self.eos_ids = set(eos_ids)
        self.families = families
        self.settings = settings
        self.replanner = replanner
        self.live = live
        self.policy = policy
        self.drafter = CandidateDrafters([f.drafter for f in families if f.drafter is not None])
        # Token Recycling drafters of one-stage candidates learn from every target forward, whichever
        # candidate played it, so that their tables are current when the re-planner picks them
        self.learners = [f.drafter for f in families if f.drafter is not None and f.drafter.learns_from_verifier
                         and f.one_stage]
        # learners whose tables need probabilities: a dynamic tree grows best-first by them (re-solved trees are static)
        self.weighted = {id(family.drafter) for family, candidate in zip(families, settings.candidates)
                         if candidate.stages and candidate.stages[-1].shape.dynamic}
        self.wired: set[int] = set()
        self.scored = sorted({c.stages[-1].drafter for c in settings.candidates if c.stages} | set(live.scores))
        self.alpha_memo: dict[tuple, float] = {}
        # forwards not yet reduced: (Token Recycling learners, first position, tokens, logits, parents)
        self.unread: list[tuple[list, int, list[int], torch.Tensor, tuple[int, ...] | None]] = []
        self.observe_seconds = 0.0  # spent reading target forwards for the scores, over all requests

    def entries(self) -> dict:
        """Posterior acceptance entry of every drafter with a prior in the profile (drafter id -> entry)."""
        result = {}
        for drafter in self.scored:
            prior = self.replanner.prior(drafter)
            if prior is not None:
                result[drafter] = posterior_entry(prior, self.live.counts(drafter), self.settings.prior_weight)
        return result

    def alphas(self) -> dict[str, float]:
        """Posterior alpha of every drafter with a prior; a chain histogram seen before is not recomputed."""
        result = {}
        for drafter in self.scored:
            prior = self.replanner.prior(drafter)
            if prior is None:
                continue
            counts = self.live.counts(drafter)
            key = (drafter, counts.accepted_hist, counts.censored)
            if key not in self.alpha_memo:
                if len(self.alpha_memo) > 100_000:
                    self.alpha_memo.clear()
                self.alpha_memo[key] = posterior_alpha(prior, counts, self.settings.prior_weight)
            result[drafter] = self.alpha_memo[key]
        return result

    def _runner(self, index: int, stages: tuple[Stage, ...]) -> StageRunner:
        runner = self.families[index].runner(stages)
        if id(runner) not in self.wired:
            self.wired.add(id(runner))
            others = [learner for learner in self.learners if learner is not runner.drafter]
            runner.listeners.append(lambda tokens, logits, parents: self._observe(others, tokens, logits, parents))
        return runner

    def _observe(self, learners: list, tokens: list[int], logits: torch.Tensor, parents) -> None:
        """One target forward: a learner that is not a Token Recycling table learns now (e.g. a
        graft); the rows the live scores and the tables need are kept, unread, until :meth:`read`
        (timed as scoring overhead, on the host clock: no device synchronisation is added)."""
        begin = time.perf_counter()
        tables = [learner for learner in learners if learner.learns_from_top_rows]
        for learner in learners:
            if not learner.learns_from_top_rows:
                learner.observe(tokens, logits)
        first = self.live.claim(len(tokens))  # keeps positions in step
        if tables or self.live.wants_rows:
            self.unread.append((tables, first, list(tokens), logits, parents))
        self.observe_seconds += time.perf_counter() - begin
        if len(tokens) > UNREAD_ROWS:
            self.read()  # a prefill: its rows are too many to hold

    def read(self) -> float:
        """Reduce every unread forward to its rows' top-k in one call, for the live scores and the
        Token Recycling tables of the candidates that were not playing them; returns the seconds
        spent (also added to ``observe_seconds``)."""
        if not self.unread:
            return 0.0
        begin = time.perf_counter()
        unread, self.unread = self.unread, []
        count = max([ROW_TOP] + [learner.top_k for tables, *_ in unread for learner in tables])
        # probabilities only for a best-first tree's table, else ranks are all anyone reads
        normalized = any(id(learner) in self.weighted for tables, *_ in unread for learner in tables)
        logits = unread[0][3] if len(unread) == 1 else torch.cat([forward[3] for forward in unread])
        ids, probs = top_rows(logits, count, normalized)  # [rows, count] each
        id_rows, prob_rows = ids.tolist(), probs.tolist()  # converted once for every reader
        row = 0
        for tables, first, tokens, _, parents in unread:
            ids_here, probs_here = id_rows[row: row + len(tokens)], prob_rows[row: row + len(tokens)]
            row += len(tokens)
            self.live.record_top(first, tokens, ids_here, probs_here, parents)
            for learner in tables:
                learner.table.update_top(tokens, ids_here, probs_here)
        seconds = time.perf_counter() - begin
        self.observe_seconds += seconds
        return seconds

    def generate(self, prompt_ids: list[int], max_new_tokens: int, sampling: SamplingConfig,
                 on_commit: Callable[[list[int]], bool | None] | None = None,
                 keep_cache: bool = False) -> AdaptiveResult:
        """As :meth:`SpeculativeEngine.generate`; ``keep_cache`` is ignored: the live scores read the
        prefill's rows, so every request prefills its whole prompt."""
        loop = _Loop(self, prompt_ids, sampling, max_new_tokens)
        while True:
            chunk = loop.round()
            if on_commit is not None and on_commit(chunk):  # True: the caller ends the request here
                loop.text.stop()
            if loop.text.remaining <= 0 or loop.text.done:
                return loop.result()
            loop.after_round()  # between rounds only: scores, re-plan, switch


class _Loop:
    """One request's decoding loop: rounds, the live scores and the switching rule."""

    def __init__(self, engine: AdaptiveEngine, prompt_ids: list[int], sampling: SamplingConfig, max_new_tokens: int):
        self.engine = engine
        self.sampling = sampling
        self.generator = torch.Generator().manual_seed(sampling.seed)
        self.text = Committed(prompt_ids, max_new_tokens, engine.eos_ids)
        self.committed = self.text.context  # the same list: the prompt, then every committed token
        self.index, self.stages = 0, engine.settings.candidates[0].stages
        self.uses: dict[tuple, list] = {}
        self.stats: dict[tuple[str, str], StageStats] = {}
        self.switches = self.replans = self.since = self.checked_rounds = 0
        self.adaptive_seconds = 0.0
        self.observed_before = engine.observe_seconds
        self.start = now(engine.device)
        engine.target.reset()
        engine.drafter.reset()
        engine.unread = []  # the last request's final round: nobody reads it
        engine.live.reset(len(prompt_ids))
        self.alphas = engine.alphas()
        engine.live.begin_forward(0)
        engine._runner(self.index, self.stages).catch_up(self.committed)  # the prefill

    def round(self) -> list[int]:
        engine = self.engine
        runner = engine._runner(self.index, self.stages)
        engine.live.begin_forward(len(self.committed) - 1)
        remaining = self.text.remaining
        result = runner.play(self.committed, remaining, self.sampling, self.generator)
        chunk = self.text.add(result.chunk)
        top = self.stages[-1] if self.stages else None
        key = (top.drafter, top.verifier) if top else ("none", "target")
        self.stats.setdefault(key, StageStats(*key)).add(result)
        use = self.uses.setdefault(describe_stages(self.stages, engine.replanner.target), [self.stages, 0, 0])
        use[1] += 1
        use[2] += len(chunk)
        if top is not None and len(self.stages) == 1 and top.shape.kind == "sequence" \
                and top.drafter not in engine.live.scores:
            engine.live.observe_chain(top.drafter, min(top.shape.gamma, remaining - 1), len(result.chunk) - 1)
        return chunk

    def after_round(self) -> None:
        """Every ``SCORE_EVERY`` rounds, and before a re-plan or a forced switch: read the unread
        forwards, score the committed tokens, and re-plan when the rule says so (timed as overhead;
        the reading apart, as ``reading_seconds``)."""
        engine = self.engine
        begin = now(engine.device)
        self.since += 1
        forced = engine.policy(len(self.text.per_forward), self.committed) if engine.policy is not None else None
        if forced is None and self.since < engine.settings.every and self.since % SCORE_EVERY:
            self.adaptive_seconds += now(engine.device) - begin
            return
        reading = engine.read()
        engine.live.commit(self.committed)
        if forced is not None:
            self._switch(forced, engine.settings.candidates[forced].stages)
        elif self.since >= engine.settings.every or self._moved():
            self._replan()
        self.adaptive_seconds += now(engine.device) - begin - reading

    def _moved(self) -> bool:
        rounds = self.engine.live.chain_rounds
        if rounds == self.checked_rounds:
            return False  # no chain round was scored since the last check: no alpha moved
        self.checked_rounds = rounds
        alphas = self.engine.alphas()
        return any(abs(alpha - self.alphas.get(drafter, alpha)) > self.engine.settings.threshold
                   for drafter, alpha in alphas.items())

    def _replan(self) -> None:
        entries = self.engine.entries()
        self.alphas = {drafter: entry.alpha for drafter, entry in entries.items()}
        self.since = 0
        self.replans += 1
        choice = self.engine.replanner.choose(entries, keep=self.index)
        current = choice.costs[self.index]
        if choice.ms_per_token < current * (1 - self.engine.settings.margin):
            self._switch(choice.index, choice.stages)
        elif choice.index == self.index:
            self._switch(choice.index, choice.stages)  # the same family, its re-solved shape

    def _switch(self, index: int, stages: tuple[Stage, ...]) -> None:
        if (index, stages) != (self.index, self.stages):
            self.switches += 1
            self.index, self.stages = index, stages

    def result(self) -> AdaptiveResult:
        engine = self.engine
        seconds = now(engine.device) - self.start
        below = [stats for family in engine.families if family.drafter is not None
                 for stats in family.drafter.stage_stats()]
        stages = tuple(stats for stats in below if stats.verify_forwards) + tuple(self.stats.values())
        uses = tuple(ConfigurationUse(summary, stages_, rounds, tokens)
                     for summary, (stages_, rounds, tokens) in self.uses.items())
        return AdaptiveResult(
            tuple(self.text.new), seconds, len(self.text.per_forward), tuple(self.text.per_forward),
            sum(s.draft_seconds for s in self.stats.values()), sum(s.verify_seconds for s in self.stats.values()),
            self.text.stop_reason or "max_new_tokens", stages, configurations=uses, switches=self.switches,
            replans=self.replans, adaptive_seconds=self.adaptive_seconds + engine.observe_seconds - self.observed_before,
            reading_seconds=engine.observe_seconds - self.observed_before)
