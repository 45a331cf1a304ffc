"""The hierarchy DP as a linear program (its dual), solved with HiGHS to check the DP.

docs/planner-math.md section 4: maximise sum_i L_i subject to::

    L_i <= T_i(1)
    L_i <= L_tree(i)
    L_i <= (gamma / E_ji) * L_j + T_i(gamma + 1) / E_ji          for all j < i, gamma

With a stage cap S the variables are L_{s,i} (at most s stages), the stage-s inequalities
read L_{s-1,j} on the right, and L_{s,i} <= L_{s-1,i}. Every L is bounded above by the
minimum of its right-hand sides and the right-hand sides grow with the L's below, so the
maximum of the sum sets each L to that minimum: the LP optimum equals the DP values (the
shortest-path LP duality; HSD, arXiv 2510.19705). Retrieval drafters and trees give constant
right-hand sides, folded into the upper bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from .costs import CostModel
from .hierarchy import stage_choices, stage_cost


@dataclass(frozen=True)
class LpResult:
    """``values[i]`` = L_{S,i} from the LP; ``status``/``message`` from scipy (0 = optimal)."""

    values: dict[str, float]
    status: int
    message: str

    @property
    def success(self) -> bool:
        return self.status == 0


def _rows(costs: CostModel, max_stages: int) -> tuple[list[dict[int, float]], list[float], np.ndarray]:
    """Inequality rows (sparse dicts), right-hand sides, and upper bounds of every variable."""
    models = costs.models
    index = {(s, m): s * len(models) + k for s in range(max_stages + 1) for k, m in enumerate(models)}
    upper = np.array([costs.latency[m](1) for s in range(max_stages + 1) for m in models])
    rows: list[dict[int, float]] = []
    rhs: list[float] = []
    for stages in range(1, max_stages + 1):
        for verifier in models:
            here = index[stages, verifier]
            rows.append({here: 1.0, index[stages - 1, verifier]: -1.0})
            rhs.append(0.0)
            for choice in stage_choices(costs, verifier, stages - 1):
                if choice.kind == "tree" or choice.drafter in costs.call_ms:
                    constant = stage_cost(costs, {}, verifier, choice).ms_per_token
                    upper[here] = min(upper[here], constant)
                    continue
                accepted = costs.accepted[choice.drafter, verifier][choice.gamma]
                verify = costs.verify_ms(choice.drafter, verifier, choice.gamma)
                if not math.isfinite(verify):
                    continue
                rows.append({here: 1.0, index[stages - 1, choice.drafter]: -costs.draft_tokens(choice.drafter, verifier, choice.gamma) / accepted})
                rhs.append(verify / accepted)
    return rows, rhs, upper


def solve_lp(costs: CostModel, max_stages: int) -> LpResult:
    """Maximise sum L subject to the DP's inequalities with ``scipy.optimize.linprog(method="highs")``.

    Returns
    -------
    LpResult
        L_{S,i} for every model (S = max_stages) and scipy's status and message.
    """
    models = costs.models
    rows, rhs, upper = _rows(costs, max_stages)
    size = len(upper)
    matrix = np.zeros((len(rows), size))
    for number, row in enumerate(rows):
        for column, coefficient in row.items():
            matrix[number, column] += coefficient
    result = linprog(
        c=-np.ones(size),
        A_ub=matrix if rows else None,
        b_ub=np.array(rhs) if rows else None,
        bounds=[(0.0, bound) for bound in upper],
        method="highs",
    )
    if result.status != 0:
        return LpResult({}, int(result.status), str(result.message))
    top = max_stages * len(models)
    values = {m: float(result.x[top + k]) for k, m in enumerate(models)}
    return LpResult(values, 0, str(result.message))
