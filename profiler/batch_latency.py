"""Batched latency T(n, b): ms for one forward of ``b`` sequences x ``n`` new tokens each over a
warm cache of ``context`` tokens per sequence (docs/planner-math.md section 11.1).

A serving engine verifies the drafts of every running request in one forward; the planner needs
that forward's cost at each batch size to plan for load (SmartSpec, arXiv 2406.14066). The
measurement: ``b`` copies of the context are prefilled once into a transformers
``DynamicCache`` of ``b`` rows; each timed forward appends ``[b, n]`` tokens (taken from the
context: their values do not change the cost) and the cache is cropped back to the context
after it. All rows hold the same number of positions, so no padding mask is needed.

On CPU the forward runs eagerly whatever runtime profiled batch 1 (the planner reads batched
curves unpadded). On CUDA with a compiled runtime it runs through the runtime's own compiled step
(``torch.compile`` with CUDA graphs, runtime/compile/compiled.py) over a static cache of ``b``
rows: an eager forward there is bound by kernel launches, not by the device (measured on an H200,
Llama-3-8B shape: 7.6 ms for one sequence and one token through CUDA graphs, 21.6 ms for four
sequences eagerly, 18.8 ms for sixteen; docs/results.md, "GPU check"), so an eager batched curve
beside a compiled batch-1 curve would tell the planner that load costs three times what it does.
Each timed graph writes the same cache rows past the context and the length pointer never moves,
so the cache needs no restoring. A batch that does not fit in device memory ends the model's
batched curves (the largest batch that fit is kept).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache

from specplan.core.profile import LatencyCurve
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.profiler.latency import WIDTHS, _filler, _median_curve
from specplan.runtime.compile.compiled import compiled_step, padded_mask
from specplan.runtime.compile.static_cache import new_static_cache

# step(model, cache, input_ids, position_ids, attention_mask): one forward over a static cache
# (runtime/compile/compiled.py's traced function, compiled or not)
Step = Callable[[torch.nn.Module, object, torch.Tensor, torch.Tensor, torch.Tensor], object]

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
                          progress: Callable[[], None] | None = None, step: Step | None = None) -> LatencyCurve:
    """Median ms per forward of ``batch`` sequences x each width over a cache of ``context_ids`` per row:
    eagerly over a ``DynamicCache``, or through ``step`` over a static cache when given."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    context = list(context_ids)
    rows = torch.tensor([context] * batch, dtype=torch.long, device=device)  # [batch, context]
    filler = torch.tensor([_filler(context, widths)] * batch, dtype=torch.long, device=device)  # [batch, max width]
    if step is not None:
        return _static_batch_latency(model, device, rows, filler, widths, repeats, progress, step)
    cache = DynamicCache(config=model.config)
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


def _static_batch_latency(model: torch.nn.Module, device: torch.device, rows: torch.Tensor, filler: torch.Tensor,
                          widths: Sequence[int], repeats: int, progress: Callable[[], None] | None,
                          step: Step) -> LatencyCurve:
    """:func:`measure_batch_latency` through ``step`` over a static cache of as many rows as ``rows``
    (the context, [batch, context]): the context prefilled eagerly, then each width's forward of
    ``filler``'s first columns attending to the whole buffer (fixed shapes, as the runtime's CUDA
    graphs replay them) and never committed."""
    (batch, past), capacity = rows.shape, rows.shape[1] + max(widths)
    cache = new_static_cache(model, device, capacity)
    with torch.inference_mode():
        cache.begin(past)
        model(input_ids=rows, position_ids=torch.arange(past, device=device).expand(batch, past),
              attention_mask=padded_mask(0, past, past, past, model.dtype, device), past_key_values=cache,
              use_cache=True)
        cache.commit(past)
    masks = {width: padded_mask(past, width, width, capacity, model.dtype, device) for width in widths}
    positions = {width: torch.arange(past, past + width, device=device).expand(batch, width) for width in widths}

    def call(width: int) -> None:
        cache.begin(width, capacity)
        if device.type == "cuda":
            torch.compiler.cudagraph_mark_step_begin()
        with torch.inference_mode():
            step(model, cache, filler[:, :width], positions[width], masks[width])

    curve = _median_curve(call, lambda: None, past, widths, repeats, device, progress)
    return LatencyCurve(curve.context, curve.n, curve.ms, "measured", batch)


def batch_step(model: torch.nn.Module, device: torch.device, runtime: RuntimeMode) -> Step | None:
    """The step batched forwards are timed through: the runtime's compiled step on CUDA with a
    compiled runtime, else None (eager)."""
    if device.type == "cuda" and runtime.compiled:
        return compiled_step(model, device).function
    return None


def _out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower()


def measure_batch_curves(model: torch.nn.Module, device: torch.device, context_ids: Sequence[int],
                         batches: Sequence[int], repeats: int, max_tokens: int = MAX_TOKENS, label: str = "model",
                         progress: Callable[[], None] | None = None, runtime: RuntimeMode = EAGER
                         ) -> tuple[LatencyCurve, ...]:
    """One curve per batch size above 1 in ``batches`` (ascending), stopping at the first that runs
    out of device memory (a warning names it); timed as :func:`batch_step` says for ``runtime``."""
    curves = []
    step = batch_step(model, device, runtime)
    for batch in sorted(b for b in set(batches) if b > 1):
        try:
            curves.append(measure_batch_latency(model, device, context_ids, batch,
                                                batch_widths(batch, WIDTHS, max_tokens), repeats, progress, step))
        except (RuntimeError, torch.OutOfMemoryError) as error:
            if not _out_of_memory(error):
                raise
            if device.type == "cuda":
                torch.cuda.empty_cache()
            warnings.warn(f"{label}: batch {batch} does not fit in {device.type} memory; its batched curves stop "
                          f"at batch {curves[-1].batch if curves else 1}", stacklevel=2)
            break
    return tuple(curves)
