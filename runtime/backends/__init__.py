"""The runtime backends, one object each (torch_backend.py, llama_cpp_backend.py, the interface in
base.py): the runtime and the layers above ask a backend what they would otherwise branch on its name
for. :func:`backend_for` is the one place a backend's name is read; its traits are core/backends.py."""

from __future__ import annotations

from specplan.core.backends import traits
from specplan.runtime.backends.base import Backend
from specplan.runtime.backends.llama_cpp_backend import LlamaCppBackend
from specplan.runtime.backends.torch_backend import TorchBackend

BACKENDS = {backend.name: backend for backend in (TorchBackend(), LlamaCppBackend())}


def backend_for(name: str) -> Backend:
    """The backend called ``name`` (a profile's, a loaded model's or a session's ``backend``); SpecplanError
    (one line) for any other name."""
    return BACKENDS[traits(name).name]
