"""The runtime backends a profile is measured on and its plans run on (``torch``, ``llama.cpp``), as data:
what the planner, the core types and the command line know of each, one frozen row per backend. The
runtime's objects for them (loading, sessions, contexts) are in runtime/backends/ and carry these rows.
Nothing outside those two places compares a backend's name (tests/architecture/test_backend_names.py).
No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass

from specplan.core.drafter_spec import KINDS, RETRIEVAL_KINDS
from specplan.core.errors import SpecplanError


@dataclass(frozen=True)
class BackendTraits:
    """One backend as the layers above the runtime see it (docs/backends.md)."""

    name: str
    source: str  # the profile's ``device.source`` when this backend measured its curves (Profile.backend)
    tree_kinds: tuple[str, ...]  # drafter kinds whose tree stages it grows (the planner searches by it)
    profile_widths: tuple[int, ...]  # the widths n its T(n) is timed at
    default_drafters: tuple[str, ...]  # `specplan profile`'s drafters when no --drafter is given
    kernel_settings: bool  # --threads, --numerics and --flash-attention choose its kernels
    batched_runs: bool  # `bench --batch` measures it (beside transformers generate of the same torch weights)
    derives_batch_curves: bool  # T(n, b) = T(b n) from one sequence's curve (docs/planner-math.md section 11.5)
    # the engine users run without specplan, whose own plain decoding is the planner's floor
    # (profiler/engine_floor.py, docs/planner-math.md section 9.1); "": the target's T(1) is
    engine_floor: str = ""

    def grows_trees(self, kind: str) -> bool:
        """Whether this backend's runtime grows tree stages from drafters of ``kind``.

        >>> LLAMA_CPP.grows_trees("model"), LLAMA_CPP.grows_trees("recycle"), TORCH.grows_trees("model")
        (False, True, True)
        """
        return kind in self.tree_kinds

    @property
    def grows_model_trees(self) -> bool:
        """Whether a model (a ``model:`` drafter, a middle model, the target) grows trees here."""
        return self.grows_trees("model")


TORCH = BackendTraits(
    name="torch", source="measured", tree_kinds=KINDS, profile_widths=(1, 2, 4, 8, 16, 32, 64),
    default_drafters=("ngram:3", "ngram:5", "recycle", "cache", "layerskip:20", "layerskip:26"),
    kernel_settings=False, batched_runs=True, derives_batch_curves=False)

LLAMA_CPP = BackendTraits(
    # llama.cpp grows trees from retrieval tables only; a model drafter's stage there is a sequence
    name="llama.cpp", source="llama.cpp", tree_kinds=RETRIEVAL_KINDS,
    # its T(n) is steep and uneven on a CPU (a decode of n >= 2 is compute-bound): measured densely
    profile_widths=(1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64),
    # layer skipping needs the torch backend; ngram:12:12 drafts where the last 12 tokens recur, as
    # llama-server's ngram-simple does; ngram:12:6 where 6 recur (the copies of an edit or a completion
    # that a 12-token match finds late: docs/results.md, "Lookups that match on 6 tokens")
    default_drafters=("ngram:3", "ngram:5", "ngram:8:3", "ngram:12:6", "ngram:12:12", "recycle", "cache"),
    kernel_settings=True, batched_runs=False, derives_batch_curves=True,
    engine_floor="llama.cpp's own plain decoding")

BACKENDS = {backend.name: backend for backend in (TORCH, LLAMA_CPP)}
BACKEND_NAMES = tuple(BACKENDS)


def traits(name: str) -> BackendTraits:
    """The backend called ``name``; SpecplanError (one line) for any other name.

    >>> traits("llama.cpp").kernel_settings
    True
    """
    if name not in BACKENDS:
        raise SpecplanError(f"{name!r} is not a backend; use one of {', '.join(BACKEND_NAMES)}")
    return BACKENDS[name]


def traits_of_source(source: str) -> BackendTraits:
    """The backend that measured a profile whose ``device.source`` is ``source``: llama.cpp's own source, or
    torch for every other one (``measured``, ``roofline``, ``engine:NAME``: those plans run on torch).

    >>> traits_of_source("llama.cpp").name, traits_of_source("roofline").name
    ('llama.cpp', 'torch')
    """
    return next((backend for backend in BACKENDS.values() if backend.source == source), TORCH)
