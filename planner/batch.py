"""A profile seen at one batch size: the planner's input for plans under load (planner-math.md
section 11).

At ``b`` concurrent sequences decoding in lockstep, every forward of the schedule's stages
carries ``b`` sequences: a model's cost is its ``T(n, b)`` curve, and a retrieval drafter,
a host-side table lookup made once per sequence, costs ``b * ms_per_call`` per draft call.
:func:`batch_view` returns the profile with exactly those numbers, so that every solver
(the hierarchy DP, the trees, the LP check, the closed form) runs unchanged and its ms per
token is the time per committed token of one sequence in the batch (SmartSpec, arXiv 2406.14066).
Where the profile measured the batched runtime's own overhead per forward (padding masks, holes,
per-sequence verification; section 11.4), the view's target curves include it. On llama.cpp, where
several requests' tokens go into one ``llama_decode`` (``specplan serve --parallel``), a curve the
profile did not measure at ``b`` is derived from one sequence's: ``T(n, b) = T(b * n)``
(:func:`derived_curve`, section 11.5).
"""

from __future__ import annotations

from dataclasses import replace

from specplan.core.profile import LatencyCurve, ModelEntry, Profile, batch_sizes

from .latency import padded


def batch_view(profile: Profile, batch: int) -> Profile:
    """``profile`` with only its latency curves at ``batch`` (plus the batched runtime's measured
    overhead at that batch, when the profile has one) and retrieval costs times ``batch``.

    A model without a curve at ``batch`` keeps none (the planner skips it and says so). Curves
    measured at ``batch > 1`` are read unpadded (``mode: eager``): the batched forward is eager.

    >>> from specplan.core.profile import DeviceInfo, LatencyCurve, ModelEntry, RetrievalEntry
    >>> curves = (LatencyCurve(256, (1, 2), (10.0, 11.0)), LatencyCurve(256, (1, 2), (14.0, 17.0), batch=4))
    >>> target = ModelEntry("target", "default", "", role="target", latency=curves, mode="compiled")
    >>> profile = Profile(DeviceInfo("cpu", "cpu", "cpu"), (target,), (), (RetrievalEntry("ngram-3", "ngram:3", 0.05),))
    >>> view = batch_view(profile, 4)
    >>> view.target.latency[0].ms, view.target.mode, view.retrieval[0].ms_per_call
    ((14.0, 17.0), 'eager', 0.2)
    """
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    models = []
    for model in profile.models:
        curves = tuple(curve for curve in model.latency if curve.batch == batch)
        if not curves and batch > 1 and profile.backend_traits.derives_batch_curves:
            curves = derived_curves(model, batch)
        overhead = next((curve for curve in model.batch_overhead if curve.batch == batch), None)
        if overhead is not None:
            curves = tuple(with_overhead(curve, overhead) for curve in curves)
        mode = model.mode if batch == 1 else "eager"
        models.append(replace(model, latency=curves, mode=mode))
    retrieval = tuple(replace(entry, ms_per_call=entry.ms_per_call * batch) for entry in profile.retrieval)
    return replace(profile, models=tuple(models), retrieval=retrieval)


def derived_curve(curve: LatencyCurve, batch: int) -> LatencyCurve | None:
    """T(n, ``batch``) of llama.cpp from one sequence's T(n) (``curve``, batch 1): ``T(b * n)``, at the
    curve's widths n with ``b * n`` within its largest measured width (docs/planner-math.md section 11.5).

    One ``llama_decode`` of b sequences x n tokens is one forward over ``b * n`` token rows: every
    matmul runs over the rows whatever sequence they belong to, and each row attends over its own
    sequence's cells. None when not even one token per sequence fits.

    >>> derived_curve(LatencyCurve(256, (1, 2, 4, 8), (10.0, 12.0, 16.0, 30.0)), 2)
    LatencyCurve(context=256, n=(1, 2, 4), ms=(12.0, 16.0, 30.0), source='derived', batch=2)
    """
    widths = tuple(n for n in curve.n if batch * n <= curve.n[-1])
    if not widths:
        return None
    ms = tuple(padded(curve, batch * n).ms for n in widths)  # llama.cpp's kernels tile rows (latency.pads_to_buckets)
    return LatencyCurve(curve.context, widths, ms, "derived", batch)


def derived_curves(model: ModelEntry, batch: int) -> tuple[LatencyCurve, ...]:
    """Every batch-1 curve of ``model`` derived at ``batch`` (:func:`derived_curve`)."""
    derived = (derived_curve(curve, batch) for curve in model.latency if curve.batch == 1)
    return tuple(curve for curve in derived if curve is not None)


def overhead_ms(overhead: LatencyCurve, n: int) -> float:
    """The batched runtime's ms per forward of width ``n``: piecewise linear between the measured
    widths, the nearest end's value outside them (planner-math.md section 11.4).

    >>> overhead_ms(LatencyCurve(256, (1, 3), (2.0, 4.0), batch=4), 2), overhead_ms(LatencyCurve(256, (1, 3), (2.0, 4.0)), 9)
    (3.0, 4.0)
    """
    widths, ms = overhead.n, overhead.ms
    if n <= widths[0]:
        return ms[0]
    for index in range(1, len(widths)):
        if n <= widths[index]:
            share = (n - widths[index - 1]) / (widths[index] - widths[index - 1])
            return ms[index - 1] + share * (ms[index] - ms[index - 1])
    return ms[-1]


def with_overhead(curve: LatencyCurve, overhead: LatencyCurve) -> LatencyCurve:
    """``curve`` with the batched runtime's overhead added at every profiled width."""
    return replace(curve, ms=tuple(ms + overhead_ms(overhead, n) for n, ms in zip(curve.n, curve.ms)))


def seen_batches(profile: Profile, wanted: tuple[int, ...]) -> tuple[int, ...]:
    """The batch sizes of ``wanted`` the profile's target can be costed at (:func:`batch_view`): measured,
    or on llama.cpp derived (:func:`derived_curve`); ascending."""
    measured = set(batch_sizes(profile))
    derives = profile.backend_traits.derives_batch_curves
    return tuple(sorted(b for b in set(wanted) if b in measured or (derives and derived_curves(profile.target, b))))


def scheduled_batches(profile: Profile, wanted: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The batch sizes a schedule covers: those the target has a curve for (all, or those of ``wanted``;
    on llama.cpp also any ``wanted`` batch its curve can be derived at, :func:`derived_curve`).

    Raises ValueError naming the batch sizes the profile lacks.
    """
    available = batch_sizes(profile)
    if wanted is None:
        return available
    available = seen_batches(profile, wanted)
    missing = sorted(set(wanted) - set(available))
    if missing:
        raise ValueError(f"the profile has no target latency at batch {', '.join(map(str, missing))} "
                         f"(it has {', '.join(map(str, available))})")
    return tuple(sorted(set(wanted)))
