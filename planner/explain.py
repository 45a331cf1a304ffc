"""explain: a readable table of why the planner chose what it chose (``specplan plan --explain``)."""

from __future__ import annotations

from .solve import PlanResult


def _row(rank: int, marker: str, summary: str, cells: tuple[float, ...]) -> str:
    draft, verify, accepted, ms, speedup = cells
    return (f"{rank:>3} {marker:1} {draft:>9.3f} {verify:>9.3f} {accepted:>8.3f} "
            f"{ms:>9.3f} {1000.0 / ms:>8.2f} {speedup:>7.3f}  {summary}")


def explain(result: PlanResult) -> str:
    """Every candidate, fastest first: draft ms and verify ms per target forward, accepted
    length (bonus included), ms per token, tokens/s and speedup over plain decoding.

    ``*`` marks the chosen plan; ``~`` a row using latencies extrapolated past the profile.
    Ends with the solver's check, the simulation (if run) and any warnings.
    """
    plan = result.plan
    plain = next(c.ms_per_token for c in result.candidates if not c.stages)
    lines = [
        f"plan for {plan.target} on {plan.device.get('sku', '?')} at temperature {plan.temperature}: "
        f"{plan.predicted.ms_per_token:.3f} ms/token, {plan.predicted.tokens_per_s:.2f} tokens/s, "
        f"speedup {plan.predicted.speedup:.3f}",
        f"{'#':>3} {'':1} {'draft ms':>9} {'verify ms':>9} {'accepted':>8} {'ms/token':>9} "
        f"{'tok/s':>8} {'speedup':>7}  configuration",
    ]
    for rank, candidate in enumerate(result.candidates, start=1):
        marker = "*" if candidate.stages == plan.stages else ("~" if candidate.extrapolated else "")
        cells = (candidate.draft_ms, candidate.verify_ms, candidate.accepted_length,
                 candidate.ms_per_token, plain / candidate.ms_per_token)
        lines.append(_row(rank, marker, candidate.summary, cells))
    solver = plan.solver
    lines.append(f"solver: {solver.get('method')} in {solver.get('seconds', 0.0):.4f} s, "
                 f"checked by {solver.get('checked_by')}: {result.status} ({result.message})")
    lines.append(f"overshoot rule: {solver.get('overshoot_rule')} (gamma * L*(drafter) ignores chunk overshoot)")
    if result.simulation is not None:
        sim = result.simulation
        lines.append(
            f"simulated: {sim.ms_per_token:.3f} ms/token, interval [{sim.ci_low:.3f}, {sim.ci_high:.3f}] "
            f"over {sim.rounds} rounds; closed form {sim.closed_form:.3f}; overshoot error "
            f"{sim.overshoot_error_ms:+.3f} ms/token"
        )
    lines.extend(f"warning: {message}" for message in result.warnings)
    return "\n".join(lines)
