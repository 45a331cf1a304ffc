"""A plan is a contract: it runs only where its profile was measured, on the same weights.

A plan written by ``specplan plan`` carries the part of its profile that running it reads
(core/profile.py ``carried_part``); where the profile file is gone, that copy runs the plan, its sha256
checked first (docs/formats.md, "plan.yaml")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from specplan.core.errors import PlanError, ProfileError
from specplan.core.plan import Plan, load_plan
from specplan.core.profile import DeviceInfo, Profile, load_profile, profile_from_dict
from specplan.core.yamlio import file_sha256, mapping_sha256


def check_contract(plan: Plan, profile: Profile, profile_path: Path, device_info: DeviceInfo,
                   target_fingerprint: str | None, force: bool) -> None:
    """Refuse (ProfileError) a plan whose profile, device or target weights changed, unless ``force``.
    ``target_fingerprint`` None checks all but the weights (before they load: :func:`check_weights`)."""
    if profile.engine:
        raise ProfileError(
            f"{profile_path} holds {profile.engine}'s own costs (`specplan profile --engine`): its plans are for "
            f"`specplan export --engine {profile.engine}` and `specplan bench --engine {profile.engine}`; to run a plan "
            "here, profile with `specplan profile --backend llama.cpp` (or torch)")
    if force:
        return
    if plan.profile_sha256 and file_sha256(profile_path) != plan.profile_sha256:
        raise ProfileError(f"{profile_path} changed since the plan was solved; re-run `specplan plan {profile_path}` (or --force)")
    if profile.device.sku != device_info.sku or profile.device.kind != device_info.kind:
        raise ProfileError(
            f"the profile was measured on {profile.device.kind}/{profile.device.sku}, this is "
            f"{device_info.kind}/{device_info.sku}; re-profile here with `specplan profile` (or --force)"
        )
    planned_sku = plan.device.get("sku")
    if planned_sku and planned_sku != device_info.sku:
        raise ProfileError(
            f"the plan was solved for {planned_sku}, this device is {device_info.sku}; "
            "solve a plan for this device with `specplan plan` (or --force)"
        )
    if target_fingerprint is not None:
        check_weights(profile, target_fingerprint, force)


def check_weights(profile: Profile, target_fingerprint: str, force: bool) -> None:
    """Refuse (ProfileError) a target whose weights differ from the profiled ones, unless ``force``."""
    if not force and profile.target.fingerprint and profile.target.fingerprint != target_fingerprint:
        raise ProfileError("the target's weights differ from the profiled ones; re-profile with `specplan profile` (or --force)")


def load_plan_and_profile(plan_path: str) -> tuple[Plan, Profile, Path]:
    """The plan, the profile it was solved from, and that profile's path: the profile file where it is,
    else the copy the plan carries (:func:`carried_profile`; the path is then the plan's own)."""
    plan = load_plan(plan_path)
    profile_path = Path(plan.profile_path)
    if not profile_path.is_absolute():
        profile_path = Path(plan_path).resolve().parent / profile_path
    if profile_path.is_file():
        profile = load_profile(profile_path)
    elif plan.carried_profile is not None:
        profile, profile_path = carried_profile(plan, plan_path), Path(plan_path)
        plan = replace(plan, profile_sha256="")  # no file to have changed: the copy was checked instead
    else:
        raise PlanError(f"plan refers to profile {profile_path}, which does not exist, and carries no copy of it "
                        "(plans from `specplan plan` do); re-run `specplan plan` on the profile, or `specplan profile`")
    known = {model.id for model in profile.models} | {entry.id for entry in profile.retrieval}
    for stage in plan.stages:
        for name in (stage.drafter, stage.verifier):
            if name not in known:
                raise PlanError(f"plan names {name!r} but its profile {profile_path} has no such model or drafter; "
                                f"re-run `specplan plan {profile_path}`")
    if plan.target != profile.target.id:
        raise PlanError(f"plan's target {plan.target!r} is not the profile's target {profile.target.id!r}; re-run `specplan plan`")
    return plan, profile, profile_path


def carried_profile(plan: Plan, plan_path: str) -> Profile:
    """The profile copy ``plan`` carries, once its sha256 matches (PlanError naming the plan otherwise)."""
    if mapping_sha256(plan.carried_profile) != plan.carried_sha256:
        raise PlanError(f"{plan_path}: its `carried_profile` does not match its sha256 (edited?); re-run `specplan plan`")
    try:
        return profile_from_dict(plan.carried_profile)
    except ProfileError as error:
        raise PlanError(f"{plan_path}: carried_profile: {error}") from None


def check_comparable(name: str, profile: Profile, reference: Profile) -> None:
    """PlanError (one line) unless the plan ``name``'s profile runs on the backend, numerics and target
    weights of ``reference`` (the bench's plan's profile): interleaved rows compare plans, not engines."""
    if (profile.backend, profile.exact) != (reference.backend, reference.exact):
        raise PlanError(f"--also {name}: its profile runs on {profile.backend} with exact numerics {profile.exact}, "
                        f"the bench's plan on {reference.backend} with {reference.exact}; compare plans of one "
                        "backend and numerics")
    if profile.target.fingerprint != reference.target.fingerprint:
        raise PlanError(f"--also {name}: its target's weights differ from the bench's plan's; compare plans of one "
                        "target")


def check_batchable(profile: Profile) -> None:
    """PlanError (one line) when the plan's profile runs on a backend ``bench --batch`` does not measure
    (llama.cpp): it times transformers ``generate`` of the same torch weights beside the plan's engines."""
    if not profile.backend_traits.batched_runs:
        raise PlanError(f"bench --batch times transformers generate beside the plan, on the torch backend; this plan's "
                        f"profile runs on {profile.backend}: drop --batch, or measure `specplan run --batch` or "
                        "measurements/serve_http.py there")
