"""profile -> plan -> run through the CLI on a tiny random model with the real tokenizer."""

from __future__ import annotations

import json

import yaml

from specplan.cli.main import main
from specplan.core.plan import load_plan
from specplan.core.profile import load_profile


def faster_than_target(profile_path, drafter: str) -> None:
    """Give ``drafter`` half the target's latency curve. A tiny model's T(n) is Python overhead,
    so whether 2 of its 4 layers measure faster than all 4 is noise (the planner rightly drops
    a drafter that is not faster, and then no hierarchy exists); a real layer-skip drafter is."""
    document = yaml.safe_load(profile_path.read_text())
    target = next(model for model in document["models"] if model["id"] == "target")
    model = next(model for model in document["models"] if model["id"] == drafter)
    for curve, target_curve in zip(model["latency"], target["latency"]):
        curve["ms"] = [0.5 * ms for ms in target_curve["ms"]]
    profile_path.write_text(yaml.safe_dump(document, sort_keys=False))


def test_profile_plan_run(tmp_path, capsys, tiny_model_dir):
    profile_path = tmp_path / "profile.yaml"
    code = main(["profile", "--target", tiny_model_dir, "--drafter", "ngram:3", "--drafter", "layerskip:2",
                 "--quick", "--limit", "2", "--dtype", "float32", "--device", "cpu", "-o", str(profile_path)])
    assert code == 0
    profile = load_profile(profile_path)
    assert {m.id for m in profile.models} == {"target", "layerskip-2"}
    assert [r.id for r in profile.retrieval] == ["ngram-3"]
    assert all(len(m.latency[0].ms) == 7 for m in profile.models)
    entry = profile.acceptance_for("layerskip-2", "target", 0.0)
    assert entry is not None and sum(entry.accepted_hist) == entry.samples > 0
    plan = load_plan(tmp_path / "plan.yaml")  # profile solved and wrote the plan beside it
    assert plan.target == "target" and plan.predicted.tokens_per_s > 0
    capsys.readouterr()

    code = main(["run", str(tmp_path / "plan.yaml"), "--prompt", "Hello there", "--max-new-tokens", "12", "--json",
                 "--compare-plain"])
    assert code == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for field in ("prompt_id", "new_tokens", "token_ids", "text", "seconds", "tokens_per_s", "target_forwards",
                  "mean_accepted", "stages", "plan"):
        assert field in record
    assert record["identical_to_plain"] is True
    assert record["new_tokens"] == len(record["token_ids"]) <= 12

    code = main(["plan", str(profile_path), "-o", str(tmp_path / "other.yaml"), "--max-depth", "2", "--explain"])
    assert code == 0
    reduced = load_plan(tmp_path / "other.yaml")
    assert all(stage.shape.gamma <= 2 for stage in reduced.stages)
    assert "ms/token" in capsys.readouterr().out

    hierarchy_path = tmp_path / "hierarchy.yaml"
    faster_than_target(profile_path, "layerskip-2")
    assert main(["plan", str(profile_path), "-o", str(hierarchy_path), "--stages", "2"]) == 0
    hierarchy = load_plan(hierarchy_path)
    assert [(s.drafter, s.verifier) for s in hierarchy.stages] == [("ngram-3", "layerskip-2"), ("layerskip-2", "target")]
    capsys.readouterr()
    assert main(["run", str(hierarchy_path), "--prompt", "Hello there, hello there", "--max-new-tokens", "12",
                 "--json", "--compare-plain"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["identical_to_plain"] is True
    assert [(s["drafter"], s["verifier"]) for s in record["stages"]] == [("ngram-3", "layerskip-2"), ("layerskip-2", "target")]
    assert record["stages"][-1]["verify_forwards"] == record["target_forwards"]
    assert main(["plan", str(profile_path), "-o", str(tmp_path / "three.yaml"), "--stages", "3"]) == 2
    assert "3-stage" in capsys.readouterr().err
