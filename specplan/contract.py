"""A plan is a contract: it runs only where its profile was measured, on the same weights."""

from __future__ import annotations

from pathlib import Path

from specplan.errors import ProfileError
from specplan.plan import Plan
from specplan.profile import DeviceInfo, Profile
from specplan.yamlio import file_sha256


def check_contract(plan: Plan, profile: Profile, profile_path: Path, device_info: DeviceInfo, target_fingerprint: str, force: bool) -> None:
    """Refuse (ProfileError) a plan whose profile, device or target weights changed, unless ``force``."""
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
    if profile.target.fingerprint and profile.target.fingerprint != target_fingerprint:
        raise ProfileError("the target's weights differ from the profiled ones; re-profile with `specplan profile` (or --force)")
