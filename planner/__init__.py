"""The planner: from a profile to the fastest lossless speculative-decoding plan. Pure: no torch.

Modules, one concept each (formulas in ``docs/planner-math.md``):

- :mod:`.latency` T_m(n) interpolated from profiled latency curves.
- :mod:`.sequence` Leviathan's E(gamma, alpha) and its histogram form (arXiv 2211.17192).
- :mod:`.tree_dp` Sequoia's tree DP, its hardware-aware size and the retrieval graft
  (arXiv 2402.12374, 2605.20104).
- :mod:`.costs` the numbers the hierarchy DP reads, gathered from a profile.
- :mod:`.hierarchy` the HSD hierarchy DP (arXiv 2510.19705); :mod:`.lp` its LP dual.
- :mod:`.simulate` a Monte-Carlo simulator of the runtime's semantics.
- :mod:`.solve` ``solve_plan``; :mod:`.explain` the table behind ``specplan plan --explain``.
- :mod:`.hardware` T(n) from datasheets (roofline, SKU table, calibration, SKU plans).
- :mod:`.export` plans for serving engines (``specplan export``).
"""

from .explain import explain
from .options import PlanOptions
from .solve import Candidate, PlanResult, solve_plan
from .validate import NoCandidatesError, PlannerInputError, PlannerWarning

__all__ = [
    "Candidate",
    "NoCandidatesError",
    "PlanOptions",
    "PlanResult",
    "PlannerInputError",
    "PlannerWarning",
    "explain",
    "solve_plan",
]
