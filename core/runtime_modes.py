"""Which runtime drives the models, as a value passed down (never read from the environment
below the command line; the CLI maps ``--runtime`` / ``SPECPLAN_RUNTIME`` onto it).

- ``eager`` (default): transformers' forward over a ``DynamicCache``.
- ``static``: the same forward over a preallocated KV cache (no reallocation per step).
- ``compiled``: the static cache with compiled steps, loaded from ahead-of-time packages
  (:mod:`specplan.runtime.compile.aot_store`; built once per model architecture, dtype, device and
  torch version, then loaded in about a second); a model whose step cannot be exported falls
  back to the ``jit`` path, compiled up front.
- ``jit``: the static cache with ``torch.compile``'d steps, widths bucketed, compiled inside the
  process (:mod:`specplan.runtime.compile.compiled`; minutes per model on CPU).

A profile records ``eager`` or ``compiled`` (``static`` runs the eager forward, so it is
recorded as ``eager``; ``jit`` and ``compiled`` both run compiled steps).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from specplan.core.errors import SpecplanError

ENVIRONMENT_VARIABLE = "SPECPLAN_RUNTIME"
RUNTIMES = {
    "eager": {"cache": "dynamic", "compiled": False},
    "static": {"cache": "static", "compiled": False},
    "compiled": {"cache": "static", "compiled": True},
    "jit": {"cache": "static", "compiled": True},
}
AHEAD_OF_TIME = frozenset({"compiled"})  # runtimes whose compiled steps come from packages


@dataclass(frozen=True)
class RuntimeMode:
    """One of :data:`RUNTIMES`; ``cache`` and ``compiled`` are what a model session is built with."""

    name: str = "eager"

    def __post_init__(self) -> None:
        if self.name not in RUNTIMES:
            raise SpecplanError(f"{self.name!r} is not a runtime; use one of {', '.join(RUNTIMES)}")

    @property
    def cache(self) -> str:
        return RUNTIMES[self.name]["cache"]

    @property
    def compiled(self) -> bool:
        return RUNTIMES[self.name]["compiled"]

    @property
    def ahead_of_time(self) -> bool:
        """Compiled steps loaded from ahead-of-time packages (``compiled``), not compiled in the process (``jit``)."""
        return self.name in AHEAD_OF_TIME

    @property
    def profile_label(self) -> str:
        """What a profile records for this runtime: ``compiled`` or ``eager``."""
        return "compiled" if self.compiled else "eager"

    def session_options(self) -> dict:
        """``cache`` and ``compiled`` keyword arguments of a model session."""
        return dict(RUNTIMES[self.name])


EAGER = RuntimeMode("eager")


def runtime_from_environment(name: str | None = None) -> RuntimeMode:
    """``name`` if given, else ``SPECPLAN_RUNTIME``, else eager. Only entry points (the CLI, the
    benchmark scripts) call this; everything below them takes a :class:`RuntimeMode`."""
    chosen = (name or os.environ.get(ENVIRONMENT_VARIABLE, "")).strip().lower() or "eager"
    if chosen not in RUNTIMES:
        raise SpecplanError(f"{ENVIRONMENT_VARIABLE}={chosen!r} is not a runtime; use one of {', '.join(RUNTIMES)}")
    return RuntimeMode(chosen)
