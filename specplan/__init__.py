"""specplan: a quantization-aware hierarchical speculative-decoding compiler.

Flow: ``specplan profile`` measures latency curves and acceptance on this device,
``specplan plan`` solves for the fastest lossless configuration, ``specplan run``
executes it. From Python (:mod:`specplan.api`)::

    import specplan
    profile = specplan.load_profile("profile.yaml")
    plan = specplan.solve(profile)
    with specplan.Runner.open("plan.yaml") as runner:
        print(runner.generate("Write a haiku about caches.").text)

The names below are loaded on first use, so that ``import specplan`` stays light (no torch,
no solver) and any layer may record :data:`__version__` without importing the API.
"""

from specplan.core.version import __version__

_API = ("Batch", "Runner", "Solution", "load_plan", "load_plan_and_profile", "load_profile", "predict", "solve",
        "solve_detailed")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        from specplan import api

        return getattr(api, name)
    raise AttributeError(f"module 'specplan' has no attribute {name!r}")
