"""The shape a round plays at the load it starts under: the plan's schedule row for the number of
requests decoding together (``specplan serve --parallel N``; docs/planner-math.md section 11.5).

Several requests' rounds go into one ``llama_decode``, so a request's draft costs every request in
that decode: on llama.cpp ``T(n, b) = T(b * n)``, and a chain that pays alone can cost more than it
commits beside others. The plan's schedule (section 11.2) holds the best configuration per batch
size; before each round a request's engine reads how many requests are decoding and plays that
row: plain decoding, the plan's own stages, the plan's chain at the row's length, or a row of another
lookup drafter or shape (one stage over the target whose drafter reads only the committed text, an
``ngram`` lookup: the engine builds that stage over its own target session the first time the row
plays, ``can_play``). A row that needs another model's session cannot be played by the request's
engine, which was built for the plan's stages; it plays the plan and :func:`load_choices` says so.

Lossless: the choice depends only on how many requests are in flight when the round starts, never
on the round's draft or random draws, and every round is an ordinary stage round (section 5), as
with the fallback guard's choice (runtime/fallback.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from specplan.core.plan import Plan, Stage
from specplan.core.profile import Profile
from specplan.core.schedule import Schedule, ScheduleRow


@dataclass(frozen=True)
class LoadChoice:
    """What a round plays at one load: ``plain`` decoding, or the plan with its chain at ``gamma``
    (None: the plan's own length, or its chain growth's); ``played``: the row's configuration as played."""

    batch: int
    plain: bool
    gamma: int | None
    played: str
    stages: tuple[Stage, ...] = ()  # a row of other stages the engine plays in place of the plan's (``can_play``)


def _choice(batch: int, row_stages: tuple[Stage, ...], row_summary: str, plan: Plan,
            can_play: Callable[[tuple[Stage, ...]], bool] | None = None) -> LoadChoice:
    if row_stages == plan.stages:
        return LoadChoice(batch, not plan.stages, None, plan.summary() if plan.stages else "plain decoding")
    if not row_stages:  # with the reason the schedule gave, if any, in parentheses after the summary
        reason = row_summary[row_summary.index(" ("):] if " (" in row_summary else ""
        return LoadChoice(batch, True, None, "plain decoding" + reason)
    if len(row_stages) == 1 and len(plan.stages) == 1:
        row, own = row_stages[0], plan.stages[0]
        if (row.drafter, row.verifier) == (own.drafter, own.verifier) and \
                row.shape.kind == own.shape.kind == "sequence":
            return LoadChoice(batch, False, row.shape.gamma, row_summary)
    if can_play is not None and can_play(row_stages):
        return LoadChoice(batch, False, None, row_summary, row_stages)
    return LoadChoice(batch, False, None, f"the plan's {plan.summary()} (the schedule's {row_summary} needs "
                                           "another engine)")


def load_choices(plan: Plan, schedule: Schedule,
                 can_play: Callable[[tuple[Stage, ...]], bool] | None = None) -> tuple[LoadChoice, ...]:
    """The schedule's rows as a request's engine plays them, by ascending batch: the plan alone, and above
    batch 1 each row's configuration (also where the plan cannot be costed at that batch), or the plan's own
    where the row predicts the plan faster at that batch (a schedule solved with other options than the plan),
    or where the row's stages are neither the plan's chain at another length nor stages ``can_play`` accepts.

    >>> from specplan.core.plan import Stage, StageShape
    >>> from specplan.core.schedule import ScheduleRow
    >>> chain = lambda gamma: (Stage("ngram-5", "target", StageShape("sequence", gamma=gamma)),)
    >>> plan = Plan("", "", {}, "target", 0.0, chain(6), None)
    >>> rows = tuple(ScheduleRow(b, s, st, 1.0, 1.0, 1.0, 1.0, 1.0, plan_tokens_per_s=planned)
    ...              for b, s, st, planned in ((1, "six", chain(6), 1.0), (2, "three", chain(3), 0.9),
    ...                                        (4, "plain", (), 0.9), (8, "two", chain(2), 0.0)))
    >>> [(c.batch, c.plain, c.gamma) for c in load_choices(plan, Schedule(rows, 4))]
    [(1, False, None), (2, False, 3), (4, True, None), (8, False, 2)]
    """
    return (_alone(plan),) + tuple(_row_choice(row, plan, can_play) for row in schedule.rows if row.batch > 1)


def _alone(plan: Plan) -> LoadChoice:
    """A request decoding alone plays its plan."""
    return LoadChoice(1, not plan.stages, None, plan.summary())


def _row_choice(row: ScheduleRow, plan: Plan, can_play=None) -> LoadChoice:
    """The row's configuration, unless it speculates and predicts the plan faster at its batch. A row of plain
    decoding plays plain decoding: the schedule chose it over every speculation it could cost, or found none that
    pays with a margin. Where the plan itself cannot be costed at the batch (its verifies, one per request in
    one forward, lie beyond the load's curve: chains of 63 at 4 requests), the row plays too: a shape whose
    cost was measured rather than one whose forward no profile timed (docs/planner-math.md section 11.5)."""
    if row.plan_tokens_per_s == 0 and plan.stages and row.stages != plan.stages:
        choice = _choice(row.batch, row.stages, row.summary, plan, can_play)
        return replace(choice, played=f"{choice.played} (the plan's own not costed at this load)")
    if row.stages and row.plan_tokens_per_s > row.tokens_per_s:
        return _choice(row.batch, plan.stages, plan.summary(), plan)
    return _choice(row.batch, row.stages, row.summary, plan, can_play)


class LoadSchedule:
    """Before each round, the :class:`LoadChoice` for ``load()`` requests decoding (the row of the largest
    scheduled batch at most that load; the first row below the smallest)."""

    def __init__(self, choices: tuple[LoadChoice, ...], load: Callable[[], int]):
        if not choices:
            raise ValueError("a load schedule needs at least one row")
        self.choices = tuple(sorted(choices, key=lambda choice: choice.batch))
        self.load = load

    def choice(self) -> LoadChoice:
        return self.at(self.load())

    def at(self, load: int) -> LoadChoice:
        """The choice for ``load`` sequences decoding together."""
        fitting = [choice for choice in self.choices if choice.batch <= load]
        return fitting[-1] if fitting else self.choices[0]

    def describe(self) -> str:
        """One line: what each scheduled load plays."""
        return "; ".join(f"{choice.batch} at once: {choice.played}" for choice in self.choices)


EVERY_LOAD_UP_TO = 8  # up to this many sequences the schedule has a row for every load; beyond, for 2, 4, 8, ...


def serving_schedule(plan: Plan, profile: Profile, parallel: int) -> Schedule | None:
    """The schedule ``parallel`` sequences decoded together play by load (``serve --parallel``, ``run --batch``):
    the plan's own where it has one, else solved now from the profile among what the plan's engine can play
    (plain decoding, the plan, its chain at another length: :func:`~specplan.planner.schedule.playable_schedule`;
    on llama.cpp ``T(n, b) = T(b n)``, docs/planner-math.md section 11.5), at every load from 1 to ``parallel``
    (up to ``EVERY_LOAD_UP_TO``; beyond, at 2, 4, 8, ... and ``parallel``). A load between two rows plays the
    lower row, whose chains were costed for fewer requests: 3 requests on rows of 2 and 4 would verify three of
    the 2-request row's chains of 63 together. None for ``parallel`` 1."""
    from specplan.planner.batch import seen_batches
    from specplan.planner.schedule import playable_schedule

    if parallel < 2:
        return None
    if plan.schedule is not None:
        return plan.schedule
    if parallel <= EVERY_LOAD_UP_TO:
        wanted = set(range(1, parallel + 1))
    else:
        wanted = {1, parallel} | {1 << k for k in range(1, parallel.bit_length()) if 1 << k <= parallel}
    return playable_schedule(plan, profile, seen_batches(profile, tuple(wanted)))  # a larger load plays the last row


def load_schedule(plan: Plan, profile: Profile, parallel: int, batcher,
                  can_play: Callable[[tuple[Stage, ...]], bool] | None = None) -> LoadSchedule:
    """What each round of ``parallel`` sequences decoded together by ``batcher`` plays at the load it starts under:
    :func:`serving_schedule`'s rows, or the plan alone (one sequence at a time, or a profile seen at batch 1 only).
    ``can_play``: which rows of other stages the engines build and play (:func:`load_choices`)."""
    schedule = serving_schedule(plan, profile, parallel)
    if schedule is None:
        return LoadSchedule((_alone(plan),), lambda: 1)
    return LoadSchedule(load_choices(plan, schedule, can_play), lambda: batcher.active)

