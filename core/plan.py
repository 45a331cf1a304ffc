"""plan.yaml: the configuration the planner chose (docs/formats.md). A plan is a contract:
``specplan run`` executes exactly the stages it lists.

Stages are listed bottom (first drafter) to top (verified by the target). No stages means
plain decoding of the target.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from specplan.core.errors import PlanError, TreeError
from specplan.core.limits import MAX_DEPTH, MAX_STAGES, MAX_TREE_BUDGET, check_count
from specplan.core.parents import capped_parents, check_parents, leaf_count, tree_depth
from specplan.core.prediction import PredictionLengths, lengths_from_dict, lengths_to_dict
from specplan.core.plan_adaptive import AdaptiveSettings, adaptive_from_dict, adaptive_to_dict
from specplan.core.schedule import Schedule, plan_number, schedule_from_dict, schedule_to_dict
from specplan.core.yamlio import SCHEMA_VERSION, read_document, write_document

SHAPE_KINDS = ("sequence", "tree")


@dataclass(frozen=True)
class StageShape:
    """Draft shape of one stage.

    ``sequence``: a chain of ``gamma`` draft tokens. ``tree``: either an explicit
    ``parents`` array (static, e.g. the Sequoia DP tree; node 0 is the root = last committed
    token) or ``budget`` nodes grown to ``depth`` (``dynamic``: best-first at run time).
    ``graft`` (tree stages only; Graft, arXiv 2605.20104): the id of a retrieval drafter
    whose tree takes up to ``graft_budget`` of the stage's nodes, pruned from the model tree
    by confidence, so that the node count stays the shape's.
    """

    kind: str
    gamma: int = 0
    budget: int = 0
    depth: int = 0
    dynamic: bool = False
    parents: tuple[int, ...] = ()
    graft: str = ""
    graft_budget: int = 0

    def __post_init__(self) -> None:
        if self.kind not in SHAPE_KINDS:
            raise PlanError(f"shape kind {self.kind!r} is not one of {', '.join(SHAPE_KINDS)}")
        if self.kind == "sequence" and self.gamma < 1:
            raise PlanError(f"sequence shape needs gamma >= 1 (got {self.gamma}); fix the plan")
        if self.kind == "tree":
            if self.parents:
                validate_parents(self.parents)
                if self.dynamic:
                    raise PlanError("a tree with a `parents` array is static; drop `dynamic: true` or the parents")
            elif self.budget < 1 or self.depth < 1:
                raise PlanError("tree shape needs `parents` or budget >= 1 and depth >= 1; fix the plan")
            elif not self.dynamic:
                raise PlanError("a tree without `parents` is grown best-first at run time: set `dynamic: true` "
                                "(or give the static tree's parents); fix the plan")
        if self.graft or self.graft_budget:
            size = len(self.parents) or self.budget
            if self.kind != "tree" or not self.graft or not 1 <= self.graft_budget < size:
                raise PlanError(
                    f"a graft needs a tree shape, a retrieval drafter id and 1 <= graft_budget < {size} nodes "
                    f"(got kind {self.kind}, graft {self.graft!r}, graft_budget {self.graft_budget}); fix the plan"
                )


    @property
    def is_static(self) -> bool:
        """A tree with a parent array (a budget tree is grown best-first at run time)."""
        return bool(self.parents)

    @property
    def size(self) -> int:
        """Most nodes a tree of this shape has, root included (a sequence: gamma + 1)."""
        if self.kind == "sequence":
            return self.gamma + 1
        return len(self.parents) if self.parents else self.budget

    @property
    def most_paths(self) -> int:
        """Most root-to-leaf paths one draft of this shape has (a llama.cpp session gives each its own
        sequence id): a chain's 1, a static tree's leaves; a tree grown at run time or grafted, one
        per node below the root at most."""
        if self.kind == "sequence":
            return 1
        if self.parents and not self.graft:
            return leaf_count(self.parents)
        return max(1, self.size - 1)

    @property
    def max_depth(self) -> int:
        """The deepest node a draft of this shape may have: gamma, the static tree's depth, or the depth cap.

        >>> StageShape("tree", parents=(-1, 0, 0, 1)).max_depth, StageShape("tree", budget=8, depth=3, dynamic=True).size
        (2, 8)
        """
        if self.kind == "sequence":
            return self.gamma
        return tree_depth(self.parents) if self.parents else self.depth

    def capped(self, depth: int) -> "StageShape | None":
        """The tree without nodes deeper than ``depth`` (None when ``depth < 1``: no draft); a graft's
        split stays with its drafter, so a capped shape carries none."""
        if depth < 1:
            return None
        if depth >= self.max_depth:
            return self
        if not self.parents:
            return StageShape("tree", budget=self.budget, depth=min(depth, self.depth), dynamic=True)
        parents = capped_parents(self.parents, depth)
        return StageShape("tree", parents=parents, budget=len(parents), depth=tree_depth(parents))


def validate_parents(parents: tuple[int, ...] | list[int]) -> None:
    """A plan's parent array through the one validator (core/parents.py), as a PlanError."""
    try:
        check_parents(parents)
    except TreeError as error:
        raise PlanError(f"tree parents: {error}; fix the plan") from None


@dataclass(frozen=True)
class Stage:
    drafter: str
    verifier: str
    shape: StageShape

    def describe(self) -> str:
        """``draft -> target (sequence gamma 4)``, ``draft -> target (tree 8 nodes depth 3)``, with
        ``, 2 grafted from ngram-3`` for a graft: the wording of plan.yaml's alternatives."""
        shape = self.shape
        if shape.kind == "sequence":
            return f"{self.drafter} -> {self.verifier} (sequence gamma {shape.gamma})"
        graft = f", {shape.graft_budget} grafted from {shape.graft}" if shape.graft else ""
        depth = shape.depth or shape.max_depth  # a planned static tree records its DP's depth cap
        return f"{self.drafter} -> {self.verifier} (tree {shape.size} nodes depth {depth}{graft})"

    def label(self, detailed: bool = False) -> str:
        """A short name: ``drafter/gG`` for a sequence, ``drafter/treeN`` (static) or ``drafter/dtreeN``
        (grown at run time) for a tree of N nodes, ``+graftB`` for a graft; ``detailed`` adds the depth.

        >>> Stage("ngram-3", "target", StageShape("tree", budget=8, depth=3, dynamic=True)).label(True)
        'ngram-3/dtree8d3'
        """
        shape = self.shape
        if shape.kind == "sequence":
            return f"{self.drafter}/g{shape.gamma}"
        label = f"{self.drafter}/{'tree' if shape.parents else 'dtree'}{shape.size}"
        if detailed:
            label += f"d{tree_depth(shape.parents) if shape.parents else shape.depth}"
        if shape.graft:
            label += f"+{shape.graft}{shape.graft_budget}"
        return label


def describe_stages(stages: tuple[Stage, ...], target: str) -> str:
    """A one-line name of a configuration (stages bottom first), e.g. ``draft -> target (sequence gamma 4)``."""
    if not stages:
        return f"{target} plain decoding"
    return "; ".join(stage.describe() for stage in stages)


@dataclass(frozen=True)
class Prediction:
    ms_per_token: float
    tokens_per_s: float
    speedup: float
    accepted_per_target_forward: float


@dataclass(frozen=True)
class Alternative:
    summary: str
    ms_per_token: float


@dataclass(frozen=True)
class Plan:
    profile_path: str
    profile_sha256: str
    device: dict[str, str]
    target: str
    temperature: float
    stages: tuple[Stage, ...]
    predicted: Prediction
    alternatives: tuple[Alternative, ...] = ()
    solver: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    adaptive: AdaptiveSettings | None = None  # closed-loop candidates (core/plan_adaptive.py); None: static
    schedule: Schedule | None = None  # the best configuration per batch size (core/schedule.py); None: batch 1 only
    # the lengths a client's prediction drafts at, solved apart from the stages (core/prediction.py,
    # planner/prediction.py); None: the runtime keeps the fixed rule (core/prediction.py rule_lengths)
    prediction: PredictionLengths | None = None
    # the part of the profile ``run`` reads (core/profile.py carried_part), as its YAML mapping, and that
    # mapping's sha256 (core/yamlio.py mapping_sha256): what runs the plan where its profile file is not
    # (core/contract.py load_plan_and_profile); None: the plan needs its profile file
    carried_profile: dict[str, Any] | None = None
    carried_sha256: str = ""

    def summary(self) -> str:
        return describe_stages(self.stages, self.target)

    def most_tree_paths(self) -> int:
        """The most root-to-leaf paths one draft of any configuration this plan may run has (its stages,
        an adaptive plan's candidates, a schedule's rows): a llama.cpp session holds a sequence id for each."""
        configurations = [self.stages]
        if self.adaptive is not None:
            configurations += [candidate.stages for candidate in self.adaptive.candidates]
        if self.schedule is not None:
            configurations += [row.stages for row in self.schedule.rows]
        return max((stage.shape.most_paths for stages in configurations for stage in stages), default=1)


def _count(raw: dict[str, Any], key: str, high: int, where: str) -> int:
    try:
        return check_count(raw.get(key, 0), f"{where}.{key}", 0, high)
    except ValueError as error:
        raise PlanError(f"{error}; fix the plan or re-run `specplan plan`") from None


def _parents(raw: Any, where: str) -> tuple[int, ...]:
    values = list(raw or ())
    if len(values) > MAX_TREE_BUDGET:
        raise PlanError(f"{where}.parents has {len(values)} nodes, more than {MAX_TREE_BUDGET}; fix the plan")
    try:
        return tuple(check_count(v, f"{where}.parents", -1, MAX_TREE_BUDGET) for v in values)
    except ValueError as error:
        raise PlanError(f"{error}; fix the plan or re-run `specplan plan`") from None


def _shape(raw: dict[str, Any], where: str = "shape") -> StageShape:
    dynamic = raw.get("dynamic", False)
    if not isinstance(dynamic, bool):
        raise PlanError(f"{where}.dynamic must be true or false, got {dynamic!r}; fix the plan")
    return StageShape(
        kind=str(raw["kind"]),
        gamma=_count(raw, "gamma", MAX_DEPTH, where),
        budget=_count(raw, "budget", MAX_TREE_BUDGET, where),
        depth=_count(raw, "depth", MAX_DEPTH, where),
        dynamic=dynamic,
        parents=_parents(raw.get("parents"), where),
        graft=str(raw.get("graft") or ""),
        graft_budget=_count(raw, "graft_budget", MAX_TREE_BUDGET, where),
    )


def _stages(raw: Any) -> tuple[Stage, ...]:
    rows = list(raw or ())
    if len(rows) > MAX_STAGES:
        raise PlanError(f"plan lists {len(rows)} stages, more than {MAX_STAGES}; re-run `specplan plan`")
    return tuple(Stage(str(s["drafter"]), str(s["verifier"]), _shape(s["shape"], f"stages[{index}].shape"))
                 for index, s in enumerate(rows))


def _check_chain(plan: Plan, stages: tuple[Stage, ...] | None = None) -> None:
    stages = plan.stages if stages is None else stages
    for lower, upper in zip(stages, stages[1:]):
        if lower.verifier != upper.drafter:
            raise PlanError(
                f"stage verifying {lower.verifier!r} is followed by a stage drafted by {upper.drafter!r}; "
                "each stage's verifier must draft the stage above"
            )
    if stages and stages[-1].verifier != plan.target:
        raise PlanError(f"the plan's `target` is {plan.target!r} but its last stage is verified by "
                        f"{stages[-1].verifier!r}; they must name the same model (fix whichever was edited, "
                        "or re-run `specplan plan`)")


def plan_from_dict(document: dict[str, Any]) -> Plan:
    """Build a :class:`Plan` from a parsed mapping; PlanError names the bad field."""
    try:
        stages = _stages(document.get("stages"))
        predicted = Prediction(**{k: plan_number(v, f"predicted.{k}") for k, v in document["predicted"].items()
                                  if k in Prediction.__annotations__})
        plan = Plan(
            profile_path=str(document["profile"]["path"]),
            profile_sha256=str(document["profile"].get("sha256", "")),
            device={str(k): str(v) for k, v in (document.get("device") or {}).items()},
            target=str(document["target"]),
            temperature=plan_number(document.get("temperature", 0.0), "temperature"),
            stages=stages,
            predicted=predicted,
            alternatives=tuple(
                Alternative(str(a["summary"]), plan_number(a["ms_per_token"], "alternatives.ms_per_token"))
                for a in document.get("alternatives") or ()
            ),
            solver=dict(document.get("solver") or {}),
        )
        plan = replace(plan, adaptive=adaptive_from_dict(document.get("adaptive"), _stages))
        plan = replace(plan, schedule=schedule_from_dict(document.get("schedule"), _stages))
        plan = replace(plan, prediction=lengths_from_dict(document.get("prediction"), PlanError))
        plan = replace(plan, **_carried_from_dict(document.get("carried_profile")))
    except PlanError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise PlanError(f"plan is missing or has a malformed field ({exc}); regenerate it with `specplan plan`") from None
    _check_chain(plan)
    for candidate in plan.adaptive.candidates if plan.adaptive else ():
        _check_chain(plan, candidate.stages)
    for row in plan.schedule.rows if plan.schedule else ():
        _check_chain(plan, row.stages)
    return plan


def _carried_from_dict(raw: Any) -> dict[str, Any]:
    """The plan's ``carried_profile`` block (``sha256`` and ``profile``) as Plan fields; PlanError when malformed."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not isinstance(raw.get("profile"), dict) or not isinstance(raw.get("sha256"), str):
        raise PlanError("`carried_profile` must hold `sha256` and a `profile` mapping; re-run `specplan plan`")
    return {"carried_profile": raw["profile"], "carried_sha256": raw["sha256"]}


def _stage_dicts(stages_in: tuple[Stage, ...]) -> list[dict[str, Any]]:
    stages = []
    for stage in stages_in:
        shape = {k: v for k, v in asdict(stage.shape).items() if v not in (0, False, (), "")}
        shape["kind"] = stage.shape.kind
        if stage.shape.parents:
            shape["parents"] = list(stage.shape.parents)
        shape = {"kind": shape.pop("kind"), **shape}
        stages.append({"drafter": stage.drafter, "verifier": stage.verifier, "shape": shape})
    return stages


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    stages = _stage_dicts(plan.stages)
    document = {
        "schema_version": plan.schema_version,
        "profile": {"path": plan.profile_path, "sha256": plan.profile_sha256},
        "device": dict(plan.device),
        "target": plan.target,
        "temperature": plan.temperature,
        "stages": stages,
        "predicted": {k: round(v, 4) for k, v in asdict(plan.predicted).items()},
        "alternatives": [{"summary": a.summary, "ms_per_token": round(a.ms_per_token, 4)} for a in plan.alternatives],
        "solver": dict(plan.solver),
    }
    if plan.adaptive is not None:
        document["adaptive"] = adaptive_to_dict(plan.adaptive, _stage_dicts)
    if plan.schedule is not None:
        document["schedule"] = schedule_to_dict(plan.schedule, _stage_dicts)
    if plan.prediction is not None:
        document["prediction"] = lengths_to_dict(plan.prediction)
    if plan.carried_profile is not None:  # last: the plan's own fields read first
        document["carried_profile"] = {"sha256": plan.carried_sha256, "profile": plan.carried_profile}
    return document


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan; every error names the file."""
    document = read_document(path, "plan", PlanError)
    try:
        return plan_from_dict(document)
    except PlanError as error:
        raise PlanError(f"{path}: {error}") from None


def save_plan(plan: Plan, path: str | Path) -> None:
    """Write a plan atomically (refuses a non-finite prediction, which no solver should produce)."""
    plan_from_dict(plan_to_dict(plan))
    write_document(path, plan_to_dict(plan))


def plan_floor(plan: Plan) -> tuple[str, float] | None:
    """(name, ms per token) of the floor the solver held the plan to (plan.yaml ``solver.floor``);
    None for a plan solved before floors were recorded."""
    floor = plan.solver.get("floor") if isinstance(plan.solver, dict) else None
    if not isinstance(floor, dict) or not floor.get("ms_per_token"):
        return None
    return str(floor["name"]), float(floor["ms_per_token"])


def floor_phrase(plan: Plan) -> str:
    """The prediction against the floor the solver held it to (plan.yaml ``solver.floor``)."""
    floor = plan_floor(plan)
    if floor is None:
        return f"{plan.predicted.speedup:.2f}x over plain decoding"
    name, floor_ms = floor
    spread = prompt_spread_of(plan)
    over = "" if spread is None else (f"; {spread[0]:.2f}x-{spread[1]:.2f}x over draws of its {spread[2]} "
                                      "calibration prompts")
    return f"{floor_ms / plan.predicted.ms_per_token:.2f}x {name} ({1000.0 / floor_ms:.1f} tok/s{over})"


def prompt_spread_of(plan: Plan) -> tuple[float, float, int] | None:
    """(low, high, prompts): the speedup over the floor at both ends of the central 90% of draws of the
    calibration prompts (plan.yaml ``solver.prompt_spread``, planner/spread.py); None where not drawn."""
    spread = plan.solver.get("prompt_spread") if isinstance(plan.solver, dict) else None
    if not isinstance(spread, dict) or len(spread.get("speedup") or ()) != 2:
        return None
    low, high = spread["speedup"]
    return float(low), float(high), int(spread.get("prompts", 0))
