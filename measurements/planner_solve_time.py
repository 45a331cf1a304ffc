"""Solve time of the planner: 5 models (target + 4 drafters) and a retrieval drafter, every pair
measured, tree budget up to 64, depth up to 8, rank width 8, gammas 1..8, up to 3 stages.

Goal: under 1 second per solve (the LP check included). Run:

    .venv/bin/python measurements/planner_solve_time.py [--repeats 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

import numpy as np

from specplan.planner import PlanOptions, solve_plan
from specplan.core.profile import AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry

WIDTHS = (1, 2, 4, 8, 16, 32, 64)


def benchmark_profile(seed: int) -> Profile:
    """A synthetic five-model profile with every (drafter, verifier) pair measured."""
    rng = np.random.default_rng(seed)
    bases = {"target": 60.0, "draft-a": 20.0, "draft-b": 9.0, "draft-c": 4.0, "draft-d": 1.5}
    models = tuple(
        ModelEntry(name, f"model:{name}", "synthetic", role="target" if name == "target" else "drafter",
                   latency=(LatencyCurve(256, WIDTHS, tuple(base * (1 + 0.012 * (n - 1) ** 1.2) for n in WIDTHS)),))
        for name, base in bases.items()
    )
    retrieval = (RetrievalEntry("ngram-3", "ngram:3", 0.05),)
    acceptance = []
    for drafter, verifier in itertools.permutations(list(bases) + ["ngram-3"], 2):
        if verifier == "ngram-3":
            continue
        ranks = np.sort(rng.dirichlet(np.ones(9)))[::-1][:8] * rng.uniform(0.6, 0.95)
        acceptance.append(AcceptanceEntry(drafter, verifier, 0.0, float(rng.uniform(0.3, 0.9)), 8,
                                          rank_accept=tuple(float(v) for v in ranks)))
    return Profile(DeviceInfo("cpu", "synthetic", "cpu"), models, tuple(acceptance), retrieval)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    profile = benchmark_profile(args.seed)
    options = PlanOptions(max_budget=64, max_depth=8, gammas=tuple(range(1, 9)), max_stages=3)
    times, solver_seconds = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        result = solve_plan(profile, options)
        times.append(time.perf_counter() - start)
        solver_seconds.append(result.plan.solver["seconds"])
    print(f"models: {len(profile.models)} (+{len(profile.retrieval)} retrieval), budget <= 64, depth <= 8, "
          f"gammas 1..8, stages <= 3, candidates: {len(result.candidates)}")
    print(f"chosen: {result.plan.summary()}  ({result.plan.predicted.ms_per_token:.3f} ms/token, "
          f"speedup {result.plan.predicted.speedup:.2f}; {result.status})")
    print(f"solve time: first {times[0]:.3f} s, median {statistics.median(times):.3f} s, "
          f"max {max(times):.3f} s over {args.repeats} runs (solver incl. LP: {statistics.median(solver_seconds):.3f} s)")
    print("goal < 1 s:", "met" if max(times) < 1.0 else "NOT met")


if __name__ == "__main__":
    main()
