"""Wall-clock timing that is right on CPU and CUDA.

On CUDA, kernels run asynchronously: we synchronise before reading the clock (and
``cuda_event_ms`` times a callable with CUDA events for the profiler). On CPU,
``time.perf_counter`` is exact enough.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def synchronize(device: torch.device | str) -> None:
    kind = device.type if isinstance(device, torch.device) else torch.device(device).type
    if kind == "cuda":
        torch.cuda.synchronize()


def now(device: torch.device | str) -> float:
    """Seconds, after all queued work on ``device`` has finished."""
    synchronize(device)
    return time.perf_counter()


def time_ms(function: Callable[[], object], device: torch.device | str) -> float:
    """Milliseconds one call of ``function`` takes (CUDA events on a GPU)."""
    if torch.device(device).type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        function()
        end.record()
        torch.cuda.synchronize()
        return float(start.elapsed_time(end))
    begin = time.perf_counter()
    function()
    return (time.perf_counter() - begin) * 1000.0


def pick_device(requested: str) -> torch.device:
    """``auto`` -> CUDA when present, else CPU."""
    from specplan.core.errors import SpecplanError

    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise SpecplanError("--device cuda was asked for but no CUDA device is available; use --device cpu or auto")
    if requested not in ("cpu", "cuda"):
        raise SpecplanError(f"unknown device {requested!r}; use auto, cpu or cuda")
    return torch.device(requested)
