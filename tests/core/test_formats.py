"""profile.yaml / plan.yaml: round trips and one-line errors for bad files."""

from __future__ import annotations

import pytest

from specplan.core.errors import PlanError, ProfileError
from specplan.core.plan import Plan, Prediction, Stage, StageShape, load_plan, plan_from_dict, plan_to_dict, save_plan
from specplan.core.profile import (AcceptanceEntry, DeviceInfo, LatencyCurve, ModelEntry, Profile, RetrievalEntry,
                              load_profile, profile_from_dict, profile_to_dict, save_profile)


def make_profile() -> Profile:
    curve = LatencyCurve(256, (1, 2, 4, 8), (50.0, 51.0, 52.0, 60.0))
    return Profile(
        device=DeviceInfo("cpu", "test cpu", "cpu"),
        models=(ModelEntry("target", "default", "sha256:x", role="target", latency=(curve,)),
                ModelEntry("layerskip-20", "layerskip:20", "", base="target", latency=(curve,))),
        acceptance=(AcceptanceEntry("ngram-3", "target", 0.0, 0.5, 4, (5, 3, 2, 1, 1), (0.4,)),),
        retrieval=(RetrievalEntry("ngram-3", "ngram:3", 0.02),),
    )


def make_plan(stages=()) -> Plan:
    return Plan("profile.yaml", "sha256:y", {"kind": "cpu", "sku": "cpu"}, "target", 0.0, tuple(stages),
                Prediction(40.0, 25.0, 1.25, 1.6))


def test_profile_round_trip(tmp_path):
    profile = make_profile()
    save_profile(profile, tmp_path / "profile.yaml")
    assert load_profile(tmp_path / "profile.yaml") == profile
    assert (tmp_path / "profile.yaml").read_text().startswith("schema_version: 1")


def test_llama_cpp_numerics_round_trip_and_torch_profiles_read_as_before(tmp_path):
    from dataclasses import replace

    assert "numerics" not in profile_to_dict(make_profile())["device"]  # torch: the key is not written
    assert make_profile().exact
    for numerics, exact in (("exact", True), ("fast", False)):
        profile = replace(make_profile(), device=DeviceInfo("cpu", "test cpu", "cpu", "llama.cpp", numerics))
        save_profile(profile, tmp_path / "profile.yaml")
        loaded = load_profile(tmp_path / "profile.yaml")
        assert loaded == profile and loaded.exact is exact and loaded.backend == "llama.cpp"
    document = profile_to_dict(profile)
    document["device"]["numerics"] = "approximate"
    with pytest.raises(ProfileError, match="numerics 'approximate' is not one of exact, fast"):
        profile_from_dict(document)


def test_wide_from_round_trip_and_profiles_without_it_read_as_before(tmp_path):
    from dataclasses import replace

    assert "wide_from" not in profile_to_dict(make_profile())["models"][0]  # 0 (never): the key is not written
    target = replace(make_profile().models[0], wide_from=24)
    profile = replace(make_profile(), device=DeviceInfo("cpu", "test cpu", "cpu", "llama.cpp", "fast"),
                      models=(target,) + make_profile().models[1:])
    save_profile(profile, tmp_path / "profile.yaml")
    loaded = load_profile(tmp_path / "profile.yaml")
    assert loaded == profile and loaded.target.wide_from == 24
    document = profile_to_dict(profile)
    document["models"][0]["wide_from"] = -1
    with pytest.raises(ProfileError, match="wide_from"):
        profile_from_dict(document)


def test_drafted_histogram_round_trip(tmp_path):
    from dataclasses import replace

    assert "drafted_hist" not in profile_to_dict(make_profile())["acceptance"][0]  # not written when empty
    entry = replace(make_profile().acceptance[0], drafted_hist=(7, 0, 1, 1, 3))
    profile = replace(make_profile(), acceptance=(entry,))
    save_profile(profile, tmp_path / "profile.yaml")
    assert load_profile(tmp_path / "profile.yaml") == profile
    document = profile_to_dict(profile)
    document["acceptance"][0]["drafted_hist"] = [7, 0, 1]
    with pytest.raises(ProfileError, match="drafted_hist has 3 counts and accepted_hist 5"):
        profile_from_dict(document)


def test_plan_round_trip(tmp_path):
    plan = make_plan([Stage("ngram-3", "target", StageShape("sequence", gamma=4))])
    save_plan(plan, tmp_path / "plan.yaml")
    assert load_plan(tmp_path / "plan.yaml") == plan
    tree = make_plan([Stage("ngram-3", "target", StageShape("tree", parents=(-1, 0, 0, 1)))])
    assert plan_from_dict(plan_to_dict(tree)) == tree


@pytest.mark.parametrize("text, fragment", [
    ("models: [unclosed", "not valid YAML"),
    ("- just\n- a list\n", "not a YAML mapping"),
    ("schema_version: 7\nmodels: []\n", "schema_version 7"),
    ("models: []\n", "schema_version None"),
])
def test_bad_profile_files(tmp_path, text, fragment):
    path = tmp_path / "profile.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=fragment):
        load_profile(path)


@pytest.mark.parametrize("field, value", [("alpha", float("nan")), ("alpha", -0.1), ("alpha", 1.5)])
def test_profile_rejects_bad_probabilities(field, value):
    document = profile_to_dict(make_profile())
    document["acceptance"][0][field] = value
    with pytest.raises(ProfileError, match="probability"):
        profile_from_dict(document)


def test_profile_needs_a_target():
    document = profile_to_dict(make_profile())
    document["models"][0]["role"] = "drafter"
    with pytest.raises(ProfileError, match="role: target"):
        profile_from_dict(document)


def test_missing_profile_file(tmp_path):
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile(tmp_path / "nope.yaml")


@pytest.mark.parametrize("parents, fragment", [
    ((0, 0), "must be -1"),
    ((-1, 0, 3, 1), "earlier node"),
    ((-1, 1), "earlier node"),
])
def test_bad_tree_shapes(parents, fragment):
    with pytest.raises(PlanError, match=fragment):
        StageShape("tree", parents=parents)


def test_bad_shapes():
    with pytest.raises(PlanError, match="budget"):
        StageShape("tree", budget=0, depth=3)
    with pytest.raises(PlanError, match="gamma"):
        StageShape("sequence", gamma=0)
    with pytest.raises(PlanError, match="kind"):
        StageShape("pyramid")


def test_plan_stage_chain_must_connect():
    document = plan_to_dict(make_plan([Stage("ngram-3", "middle", StageShape("sequence", gamma=2)),
                                      Stage("other", "target", StageShape("sequence", gamma=2))]))
    with pytest.raises(PlanError, match="draft the stage above"):
        plan_from_dict(document)
    document = plan_to_dict(make_plan([Stage("ngram-3", "middle", StageShape("sequence", gamma=2))]))
    with pytest.raises(PlanError, match="last stage is verified by .middle."):
        plan_from_dict(document)


def test_plan_missing_field():
    document = plan_to_dict(make_plan())
    del document["predicted"]
    with pytest.raises(PlanError, match="predicted"):
        plan_from_dict(document)


@pytest.mark.parametrize("shape, message", [
    (dict(kind="tree", parents=(-1, 0), dynamic=True), "is static"),
    (dict(kind="tree", budget=8, depth=3), "set `dynamic: true`"),
    (dict(kind="tree", parents=(-1, 1)), "fix the plan"),
])
def test_a_tree_shape_says_what_it_is(shape, message):
    """``dynamic`` means something: a tree with parents is static, one without is grown at run time."""
    from specplan.core.errors import PlanError
    from specplan.core.plan import StageShape

    with pytest.raises(PlanError, match=message):
        StageShape(**shape)
    assert StageShape("tree", budget=8, depth=3, dynamic=True).dynamic
