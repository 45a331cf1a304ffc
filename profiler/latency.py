"""Latency curve T_m(n): ms for one forward of n new tokens over a warm cache of
``context`` tokens (docs/planner-math.md, Vocabulary), median of repeats after a warm-up.

The session runs the ``runtime`` it is given (:class:`~specplan.core.runtime_modes.RuntimeMode`,
the one ``run`` will execute); with compiled steps the warm-up of each width is
where its graph compiles, so compile time never enters a timed sample.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import torch

from specplan.core.backends import LLAMA_CPP, TORCH
from specplan.core.profile import LatencyCurve
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.runtime.drafters.head import HeadSession
from specplan.runtime.backend import Session
from specplan.runtime.backends import backend_for
from specplan.runtime.session import ModelSession, as_session
from specplan.runtime.timing import time_ms

WIDTHS = TORCH.profile_widths  # each backend's own widths: core/backends.py
LLAMA_CPP_WIDTHS = LLAMA_CPP.profile_widths


def measure_latency(model: "torch.nn.Module | Session", device: torch.device, context_ids: Sequence[int],
                    widths: Sequence[int] = WIDTHS, repeats: int = 5,
                    progress: Callable[[], None] | None = None, runtime: RuntimeMode = EAGER) -> LatencyCurve:
    """Median ms per forward of each width over a cache holding ``context_ids``.

    The new tokens are taken from the context itself (their values do not change the cost);
    after each timed forward the cache is trimmed back to the context. ``model`` may be a session
    of any backend (its cache is reset first).

    On llama.cpp each timed forward comes right after an untimed one of the same width:
    llama.cpp reuses its compute graph between decodes of one shape, as a run of plain or
    equal-width rounds does, and building it again costs ~0.6 ms a decode on this CPU (7% of a
    SmolLM2 T(1), 2% of the 1.5B's; docs/planner-math.md section 7.1).
    """
    session = as_session(model, device, runtime)
    session.reset()
    context = list(context_ids)
    session.extend(context)
    filler = _filler(context, widths)
    call = lambda width: session.extend(filler[:width])  # noqa: E731
    settle = call if backend_for(session.backend).reuses_graph_per_shape else None
    return _median_curve(call, lambda: session.rewind_to(context + [0]),  # keep exactly the context cached
                         len(context), widths, repeats, device, progress, settle)


def _filler(context: list[int], widths: Sequence[int]) -> list[int]:
    """New tokens taken from the context itself (their values do not change the cost)."""
    return (context * (max(widths) // max(1, len(context)) + 2))[: max(widths)]


def _median_curve(call: Callable[[int], object], restore: Callable[[], object], context: int, widths: Sequence[int],
                  repeats: int, device: torch.device, progress: Callable[[], None] | None,
                  settle: Callable[[int], object] | None = None) -> LatencyCurve:
    """Median ms of ``call(width)`` per width, ``restore()`` after each call (and after
    ``settle(width)``, run untimed right before each timed call when given).

    One warm-up pass over every width (a compiled width builds its graph there), then
    ``repeats`` passes that each time every width once, so a passing disturbance (a compile
    worker finishing, another process) spreads over all widths instead of skewing one.
    """
    samples: dict[int, list[float]] = {width: [] for width in widths}
    for attempt in range(repeats + 1):  # the first pass is the warm-up
        for width in widths:
            if settle is not None and attempt:
                settle(width)
                restore()
            elapsed = time_ms(lambda: call(width), device)
            restore()
            if attempt:
                samples[width].append(elapsed)
            if attempt == repeats and progress is not None:
                progress()
    medians = [statistics.median(samples[width]) for width in widths]
    return LatencyCurve(context=context, n=tuple(widths), ms=tuple(round(v, 4) for v in medians))


def measure_head_latency(head: torch.nn.Module, device: torch.device, context_ids: Sequence[int],
                         widths: Sequence[int] = WIDTHS, repeats: int = 5, progress: Callable[[], None] | None = None,
                         ranked: int = 8, verifier: torch.nn.Module | None = None,
                         runtime: RuntimeMode = EAGER) -> LatencyCurve:
    """Median ms of one draft-head call of each width, as a head drafter makes it in a round.

    A call is what :class:`~specplan.runtime.drafters.head.HeadDrafter` does per tree level
    (EAGLE, arXiv 2401.15077): :meth:`HeadSession.extend_with` over ``width`` tokens and their
    input features (the session's bookkeeping, the head forward, its logits scattered into the
    full vocabulary) and the top-``ranked`` children of every row. Timing the bare module
    forward instead under-states a round (measured on the CPU: 1.8 ms vs 3.0 ms per call).

    With ``verifier``, every timed call follows one (untimed) decode step of the verifier over
    the same context, as in a round, where the head reads the features that forward just
    wrote (measured on the CPU: 3.0 ms alone, 3.8 ms after a compiled target step).
    """
    session = HeadSession(head, device)
    context = list(context_ids)
    hidden = head.config.hidden_size
    features = torch.zeros(max(len(context), max(widths)), hidden, dtype=head.dtype, device=device)
    session.extend_with(context[1:], features[: len(context) - 1])
    filler = _filler(context, widths)
    length = len(session.cached)

    def call(width: int) -> None:
        logits = session.extend_with(filler[:width], features[:width])
        torch.topk(logits, ranked, dim=-1)

    step = _verifier_step(verifier, device, context, runtime) if verifier is not None else (lambda: None)

    def restore() -> None:
        session.trim(length)
        step()

    step()
    return _median_curve(call, restore, len(context), widths, repeats, device, progress)


def _verifier_step(verifier: torch.nn.Module, device: torch.device, context: list[int],
                   runtime: RuntimeMode) -> Callable[[], None]:
    """One decode step of ``verifier`` over ``context`` (kept cached), its hidden states kept."""
    session = ModelSession(verifier, device, runtime=runtime)
    session.keep_features = True
    session.extend(context)

    def step() -> None:
        session.extend(context[-1:])
        session.rewind_to(context + [0])

    return step
