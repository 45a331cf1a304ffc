"""Batched latency T(n, b): ms for one forward of ``b`` sequences x ``n`` new tokens each over a
warm cache of ``context`` tokens per sequence (docs/planner-math.md section 11.1).

A serving engine verifies the drafts of every running request in one forward; the planner needs
that forward's cost at each batch size to plan for load (SmartSpec, arXiv 2406.14066). The
measurement: ``b`` copies of the context are prefilled once into a transformers
``DynamicCache`` of ``b`` rows; each timed forward appends ``[b, n]`` tokens (taken from the
context: their values do not change the cost) and the cache is cropped back to the context
after it. All rows hold the same number of positions, so no padding mask is needed.

The forward runs eagerly whatever runtime profiled batch 1 (the compiled steps serve one
sequence); the planner therefore reads batched curves unpadded. A batch that does not fit in
device memory ends the model's batched curves (the largest batch that fit is kept).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache

from specplan.core.profile import LatencyCurve
from specplan.profiler.latency import WIDTHS, _filler, _median_curve

MAX_TOKENS = 4096  # widths with batch * n above this many token rows are not timed (the planner refuses n > 2x the last)


def batch_widths(batch: int, widths: Sequence[int] = WIDTHS, max_tokens: int = MAX_TOKENS) -> tuple[int, ...]:
    """The widths timed at ``batch``: those with ``batch * n <= max_tokens`` (at least the first).

    >>> batch_widths(32, (1, 2, 4, 8, 16, 32, 64), 512)
    (1, 2, 4, 8, 16)
    """
    kept = tuple(n for n in widths if batch * n <= max_tokens)
    return kept or tuple(widths[:1])


def measure_batch_latency(model: torch.nn.Module, device: torch.device, context_ids: Sequence[int], batch: int,
                          widths: Sequence[int] = WIDTHS, repeats: int = 5,
                          progress: Callable[[], None] | None = None) -> LatencyCurve:
    """Median ms per forward of ``batch`` sequences x each width over a cache of ``context_ids`` per row."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    context = list(context_ids)
    cache = DynamicCache(config=model.config)
    rows = torch.tensor([context] * batch, dtype=torch.long, device=device)  # [batch, context]
    filler = torch.tensor([_filler(context, widths)] * batch, dtype=torch.long, device=device)  # [batch, max width]
    with torch.inference_mode():
        model(input_ids=rows, past_key_values=cache, use_cache=True)

    def call(width: int) -> None:
        with torch.inference_mode():
            positions = torch.arange(len(context), len(context) + width, device=device).expand(batch, width)
            model(input_ids=filler[:, :width], past_key_values=cache, position_ids=positions, use_cache=True)

    def restore() -> None:
        excess = int(cache.get_seq_length()) - len(context)
        if excess:
            cache.crop(-excess)

    curve = _median_curve(call, restore, len(context), widths, repeats, device, progress)
    return LatencyCurve(curve.context, curve.n, curve.ms, "measured", batch)


def _out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower()


def measure_batch_curves(model: torch.nn.Module, device: torch.device, context_ids: Sequence[int],
                         batches: Sequence[int], repeats: int, max_tokens: int = MAX_TOKENS, label: str = "model",
                         progress: Callable[[], None] | None = None) -> tuple[LatencyCurve, ...]:
    """One curve per batch size above 1 in ``batches`` (ascending), stopping at the first that runs
    out of device memory (a warning names it)."""
    curves = []
    for batch in sorted(b for b in set(batches) if b > 1):
        try:
            curves.append(measure_batch_latency(model, device, context_ids, batch,
                                                batch_widths(batch, WIDTHS, max_tokens), repeats, progress))
        except (RuntimeError, torch.OutOfMemoryError) as error:
            if not _out_of_memory(error):
                raise
            if device.type == "cuda":
                torch.cuda.empty_cache()
            warnings.warn(f"{label}: batch {batch} does not fit in {device.type} memory; its batched curves stop "
                          f"at batch {curves[-1].batch if curves else 1}", stacklevel=2)
            break
    return tuple(curves)
