"""PlanOptions: the limits of the search (what the CLI's flags set)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specplan.core.limits import LONGEST_LOOKUP_CHAIN, MAX_DEPTH, MAX_TREE_BUDGET
from specplan.core.plan import SHAPE_KINDS

from .horizon import MAX_HORIZON
from .validate import PlannerInputError


def check_search_limits(max_budget: int, max_depth: int, budget_name: str = "--max-budget",
                        depth_name: str = "--max-depth") -> None:
    """The search's size within :mod:`specplan.core.limits` (budget 1000 alone takes ~20 s)."""
    if not 1 <= max_budget <= MAX_TREE_BUDGET:
        raise PlannerInputError(f"{budget_name} {max_budget} is out of range; use 1 to {MAX_TREE_BUDGET} tree nodes")
    if not 1 <= max_depth <= MAX_DEPTH:
        raise PlannerInputError(f"{depth_name} {max_depth} is out of range; use 1 to {MAX_DEPTH}")


@dataclass(frozen=True)
class PlanOptions:
    """What the planner may choose.

    ``max_budget``: most tree nodes (root included = verifier forward width); ``max_depth``:
    deepest tree; ``gammas``: sequence lengths to try; ``shapes``: stage kinds allowed
    (``("sequence",)`` with ``max_stages=1`` restricts the search to what the runtime runs
    today: plain decoding or one drafter -> target sequence stage); ``max_stages``: longest
    chain; ``temperature``: which acceptance entries to use; ``context``: which latency curve
    (nearest context; None = the target's first curve); ``simulation_rounds``: Monte-Carlo
    rounds used to check the chosen plan (0 = skip); ``seed``: its random seed;
    ``tree_drafters``: the drafters that may grow tree stages (None: every drafter);
    ``profiled_gammas``: also try every gamma up to the chain length a pair was profiled at (up to
    :data:`~specplan.core.limits.LONGEST_LOOKUP_CHAIN`; a match-only lookup is profiled with longer chains than a model);
    ``horizon``: tokens per answer the target's chain stages are costed over (None: an endless answer, the
    steady state; planner/horizon.py, docs/planner-math.md section 1, "A finite answer"); ``lookup_at_tie``:
    where plain decoding wins, a lookup chain predicted within ``LOOKUP_TIE`` of the floor is chosen instead
    (specplan's runtime guards it; an export for another engine does not ask it: section 9.3).
    """

    max_budget: int = 64
    max_depth: int = 8
    gammas: tuple[int, ...] = tuple(range(1, 9))
    shapes: tuple[str, ...] = ("sequence", "tree")
    max_stages: int = 3
    temperature: float = 0.0
    context: int | None = None
    simulation_rounds: int = 0
    seed: int = 0
    tree_drafters: frozenset[str] | None = None
    profiled_gammas: bool = False
    horizon: int | None = None
    lookup_at_tie: bool = False

    def __post_init__(self) -> None:
        if self.horizon is not None and not 1 <= self.horizon <= MAX_HORIZON:
            raise PlannerInputError(f"horizon {self.horizon} is out of range; use 1 to {MAX_HORIZON} tokens per answer")
        check_search_limits(self.max_budget, self.max_depth, "max_budget", "max_depth")
        if not self.gammas or min(self.gammas) < 1 or max(self.gammas) > MAX_DEPTH:
            raise PlannerInputError(f"gammas must be a non-empty list of integers from 1 to {MAX_DEPTH}, got {self.gammas}")
        unknown = [shape for shape in self.shapes if shape not in SHAPE_KINDS]
        if unknown or not self.shapes:
            raise PlannerInputError(f"shapes {self.shapes} must be a non-empty subset of {SHAPE_KINDS}")
        if self.max_stages < 0:
            raise PlannerInputError(f"max_stages must be >= 0 (0 = plain decoding only), got {self.max_stages}")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise PlannerInputError(f"temperature must be a finite number >= 0, got {self.temperature}")

    @property
    def table_size(self) -> int:
        """Largest n for which T(n) is precomputed (tree budgets, gamma + 1, overshoot)."""
        longest = max(max(self.gammas), LONGEST_LOOKUP_CHAIN if self.profiled_gammas else 0)
        return max(self.max_budget, 2 * longest + 2)


# What the runtime executes in this version (docs/architecture.md): the planner searches only
# these when it plans for `specplan run` (bench's grid uses the same options).
RUNTIME_SHAPES = ("sequence", "tree")
RUNTIME_MAX_STAGES = 3  # drafter -> middle -> ... -> target (runtime/drafters/hierarchy.py)
DEFAULT_DEPTH = 8  # `--max-depth` when not given: trees, and chains of pairs profiled at 8


def runtime_options(max_budget: int = 64, max_depth: int | None = None, temperature: float = 0.0,
                    horizon: int | None = None, lookup_at_tie: bool = False) -> PlanOptions:
    """The options ``specplan plan`` solves with: the shapes and chain lengths the runtime executes,
    trees up to ``max_depth`` deep and chains of every gamma up to it. ``max_depth`` None (no
    ``--max-depth``): trees up to :data:`DEFAULT_DEPTH`, chains up to the longer of that and the
    length each pair was profiled at (``profiled_gammas``; a match-only lookup's :data:`~specplan.core.limits.LONGEST_LOOKUP_CHAIN`).
    ``lookup_at_tie``: a plan specplan's runtime plays (``specplan plan``), not an export (docs/planner-math.md section 9.3)."""
    profiled = max_depth is None
    max_depth = DEFAULT_DEPTH if max_depth is None else max_depth
    check_search_limits(max_budget, max_depth)
    if not math.isfinite(temperature) or temperature < 0:
        raise PlannerInputError(f"--temperature {temperature} must be a finite number >= 0")
    return PlanOptions(max_budget=max_budget, max_depth=max_depth, gammas=tuple(range(1, max_depth + 1)),
                       shapes=RUNTIME_SHAPES, max_stages=RUNTIME_MAX_STAGES, temperature=temperature,
                       profiled_gammas=profiled, horizon=horizon, lookup_at_tie=lookup_at_tie)
