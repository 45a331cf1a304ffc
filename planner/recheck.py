"""A plan read from disk, re-checked against its profile: the prediction its stages give must be
the one it records. A hand-edited shape (a gamma, a tree) would otherwise run under the old
prediction; such a plan is refused unless the user forces it (``run --force``, ``bench --force``).
A plan solved over a finite answer (``solver.horizon``) is re-costed over the same answer. A plan
solved before a GGUF model's T was read as steps between profiled widths (planner/latency.py
``pads_to_buckets``) is re-costed as it was solved too: its prediction then read T linearly there.
"""

from __future__ import annotations

from dataclasses import replace

from specplan.core.errors import PlanError
from specplan.core.plan import Plan
from specplan.core.profile import Profile

from .latency import linear_widths
from .horizon import plan_horizon
from .simulate import closed_form, plan_stages

# The solver's own cost model and the closed form agree to 1% on every stored plan (a compiled
# model's bucketed T(n) is the largest gap, 0.75%); a changed shape moves the prediction more.
TOLERANCE = 0.02


def recost(plan: Plan, profile: Profile) -> float | None:
    """ms per token of ``plan``'s stages on ``profile`` (the closed form, over the plan's horizon);
    None for plain decoding and for dynamic trees (grown at run time, no closed form).

    The profile may be another one of the same models: :func:`check_prediction` re-costs on the
    plan's own, ``specplan profile --prompts`` on one whose acceptance was measured on held-out
    prompts (what the plan meets on prompts it was not chosen on)."""
    if not plan.stages or any(s.shape.kind == "tree" and not s.shape.parents for s in plan.stages):
        return None
    try:
        return closed_form(plan_stages(plan, profile), plan_horizon(plan))
    except (ValueError, IndexError, ZeroDivisionError) as error:
        raise PlanError(f"the plan's stages cannot be costed on its profile ({error}); re-run `specplan plan`") from None


def _solved_linear(plan: Plan, profile: Profile) -> bool:
    """Whether ``plan``'s prediction is what its stages cost with T read linearly between profiled widths."""
    linear = replace(profile, models=tuple(linear_widths(model) for model in profile.models))
    ms = recost(plan, linear)
    return ms is not None and abs(ms - plan.predicted.ms_per_token) <= TOLERANCE * plan.predicted.ms_per_token


def check_prediction(plan: Plan, profile: Profile) -> None:
    """PlanError (one line) when the plan's stages no longer give its recorded ms per token.

    Plain decoding and dynamic trees (grown at run time, no closed form) are not checked."""
    ms = recost(plan, profile)
    if ms is None:
        return
    recorded = plan.predicted.ms_per_token
    if not abs(ms - recorded) <= TOLERANCE * recorded and not _solved_linear(plan, profile):
        raise PlanError(f"the plan's stages predict {ms:.2f} ms per token on its profile, but the plan records "
                        f"{recorded:.2f}: was it edited? re-run `specplan plan` (or pass --force to run it anyway)")
