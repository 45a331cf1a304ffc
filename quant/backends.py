"""Import the optional backend of a method, or say in one line which extra installs it."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from specplan.core.errors import BackendMissingError
from specplan.core.quiet import banner_hidden, quiet_again
from specplan.quant.methods import QuantMethod

# What a method needs beyond its own package (transformers reads GPTQ checkpoints through optimum).
EXTRA_MODULES = {"nf4": ("bitsandbytes",), "gptq": ("gptqmodel", "optimum")}


def require_backend(method: QuantMethod) -> ModuleType:
    """Import and return ``method``'s backend package; raise BackendMissingError if any part is missing.

    GPTQModel sizes its CPU worker pool at import; on a small machine it must not start more
    workers than there are cores, so ``GPTQMODEL_CPU_WORKERS`` defaults to the core count
    (only when the user has not set it).
    """
    if method.name == "gptq":
        os.environ.setdefault("GPTQMODEL_CPU_WORKERS", str(max(1, min(os.cpu_count() or 1, 4))))
    modules = []
    with banner_hidden():  # GPTQModel logs a banner and INFO lines as it is imported
        for name in EXTRA_MODULES.get(method.name, (method.module,)):
            try:
                modules.append(importlib.import_module(name))
            except ImportError as error:
                reason = (str(error).splitlines() or ["not installed"])[0][:120]
                raise BackendMissingError(
                    f"{method.name} quantization needs the {name} package ({reason}); "
                    f"install it with `pip install 'specplan[{method.extra}]'`"
                ) from None
    quiet_again()  # the other libraries' loggers (optimum's) after their imports
    return modules[0]
