"""plan --batched: only what the batched runtime runs (one sequence stage from ngram:N or a drafter model,
or one tree stage from a retrieval drafter)."""

from __future__ import annotations

from pathlib import Path

from specplan.cli.main import main
from specplan.core.plan import load_plan
from specplan.core.profile import load_profile
from specplan.planner.batched_scope import batched_drafter, batched_scope, batched_trees
from specplan.planner.costs import build_cost_model
from specplan.planner.options import runtime_options

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "profiles" / "cpu" / "profile.yaml"


def test_the_scope_keeps_only_batched_drafters_and_one_stage():
    profile = load_profile(PROFILE)
    scoped, options = batched_scope(profile, runtime_options())
    sources = [m.source for m in scoped.models if m.role == "drafter"] + [r.source for r in scoped.retrieval]
    assert sources and all(batched_drafter(source) for source in sources)
    assert options.max_stages == 1 and "tree" in options.shapes
    assert all(a.verifier == scoped.target.id for a in scoped.acceptance)
    # trees only where the batched runtime grows them: the retrieval drafters
    assert options.tree_drafters == {r.id for r in scoped.retrieval if batched_trees(r.source)}
    assert options.tree_drafters and not options.tree_drafters & {m.id for m in scoped.models}
    model = build_cost_model(scoped, options)
    assert model.trees and all(drafter in options.tree_drafters for drafter, _ in model.trees)
    assert not [m for m in model.messages if "rank_accept" in m]  # no warning about what the scope left out


def test_plan_batched_writes_a_plan_the_batched_runtime_runs(tmp_path, capsys):
    output = tmp_path / "plan.yaml"
    assert main(["plan", str(PROFILE), "--batched", "-o", str(output)]) == 0
    plan = load_plan(output)
    assert len(plan.stages) <= 1
    for stage in plan.stages:
        assert stage.verifier == "target" and not stage.shape.graft
        source = next((r.source for r in load_profile(PROFILE).retrieval if r.id == stage.drafter), None) or \
            load_profile(PROFILE).model(stage.drafter).source
        assert batched_trees(source) if stage.shape.kind == "tree" else batched_drafter(source)
    unscoped = tmp_path / "unscoped.yaml"
    assert main(["plan", str(PROFILE), "-o", str(unscoped)]) == 0
    assert load_plan(unscoped).predicted.tokens_per_s >= plan.predicted.tokens_per_s  # the scope only removes
