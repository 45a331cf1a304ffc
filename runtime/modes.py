"""Which runtime drives the models: read in one place, torch-free (the profile module imports it).

``SPECPLAN_RUNTIME`` selects it for every :class:`~specplan.runtime.session.ModelSession` that
is not told otherwise (so ``specplan profile`` measures, and ``specplan run`` executes, the
same runtime):

- ``eager`` (default): transformers' forward over a ``DynamicCache``.
- ``static``: the same forward over a preallocated :class:`StaticKVCache` (no reallocation per step).
- ``compiled``: the static cache with ``torch.compile``'d steps, widths bucketed
  (:mod:`specplan.runtime.compiled`).

A profile records ``eager`` or ``compiled`` (``static`` runs the eager forward, so it is
recorded as ``eager``).
"""

from __future__ import annotations

import os

ENVIRONMENT_VARIABLE = "SPECPLAN_RUNTIME"
RUNTIMES = {
    "eager": {"cache": "dynamic", "compiled": False},
    "static": {"cache": "static", "compiled": False},
    "compiled": {"cache": "static", "compiled": True},
}


def runtime_name() -> str:
    """The runtime ``SPECPLAN_RUNTIME`` asks for (``eager`` when unset)."""
    name = os.environ.get(ENVIRONMENT_VARIABLE, "").strip().lower() or "eager"
    if name not in RUNTIMES:
        from specplan.errors import SpecplanError

        raise SpecplanError(f"{ENVIRONMENT_VARIABLE}={name!r} is not a runtime; use one of {', '.join(RUNTIMES)}")
    return name


def session_options(name: str | None = None) -> dict:
    """``cache`` and ``compiled`` keyword arguments of ModelSession for runtime ``name``
    (default: the one ``SPECPLAN_RUNTIME`` selects)."""
    return dict(RUNTIMES[name or runtime_name()])


def profile_mode(name: str | None = None) -> str:
    """What a profile records for runtime ``name``: ``compiled`` or ``eager``."""
    return "compiled" if session_options(name)["compiled"] else "eager"
