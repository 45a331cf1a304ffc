"""What device a profile was measured on (its SKU decides whether a plan still applies)."""

from __future__ import annotations

import platform
import re
from pathlib import Path

import torch

from specplan.core.profile import DeviceInfo
from specplan.planner.hardware.sku import sku_of_device_name


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def describe_device(device: torch.device) -> DeviceInfo:
    """Device kind, a readable name and the SKU: ``cpu``, the SKU table's key for a known GPU
    (``h100-sxm`` for "NVIDIA H100 80GB HBM3"), else a slug of the name (``plan --sku`` then
    needs the figures of that device named explicitly)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        sku = sku_of_device_name(name) or re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        return DeviceInfo(kind="cuda", name=name, sku=sku)
    return DeviceInfo(kind="cpu", name=f"{cpu_name()} ({torch.get_num_threads()} threads)", sku="cpu")
