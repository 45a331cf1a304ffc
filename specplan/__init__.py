"""specplan: a quantization-aware hierarchical speculative-decoding compiler.

Flow: ``specplan profile`` measures latency curves and acceptance on this device,
``specplan plan`` solves for the fastest lossless configuration, ``specplan run``
executes it. This package holds the CLI and the torch-free shared types; the
solver lives in :mod:`specplan.planner`, the executor in :mod:`specplan.runtime`.
"""

__version__ = "0.1.0"
