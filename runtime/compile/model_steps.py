"""Which compiled step a session gets: an ahead-of-time package (runtime ``compiled``) or
in-process compilation (runtime ``jit``, and the fallback when a step cannot be exported).

With ``compiled`` the package is loaded if one exists for the model's key and is not stale,
else built now, before anything runs (minutes on CPU, once per architecture, dtype, device and
torch version; a line on stderr says so). If export or AOT compilation fails, one line says
which model and why, and the step falls back to :class:`specplan.runtime.compile.compiled.CompiledStep`
with every width compiled up front under a progress bar, so no compile lands inside a prompt.

On CUDA, ``compiled`` runs the in-process path (``mode="reduce-overhead"``: CUDA graphs per
bucket), because an AOTInductor package replays no CUDA graph and packages have not yet been
validated on a GPU (``scripts/gpu-check.sh`` is the check to run on a CUDA machine).
"""

from __future__ import annotations

import sys
import weakref

import torch
from tqdm import tqdm

from specplan.core.runtime_modes import RuntimeMode
from specplan.runtime.compile.aot_step import AotStep
from specplan.runtime.compile.compiled import BUCKETS, CompiledStep, compiled_step
from specplan.runtime.compile.static_cache import StaticKVCache, new_static_cache

_AHEAD: "weakref.WeakKeyDictionary[torch.nn.Module, AotStep | None]" = weakref.WeakKeyDictionary()


def model_step(model: torch.nn.Module, device: torch.device, runtime: RuntimeMode) -> AotStep | CompiledStep:
    """The process-wide compiled step of ``model`` for ``runtime`` (created on first use)."""
    if runtime.ahead_of_time and device.type == "cpu":  # CUDA: reduce-overhead (CUDA graphs), below
        if model not in _AHEAD:
            _AHEAD[model] = ahead_of_time_step(model, device)
        step = _AHEAD[model]
        if step is not None:
            return step
        fallback = compiled_step(model, device)
        scratch = new_static_cache(model, device, 2 * BUCKETS[-1] + 8)
        _allocate(model, device, scratch)
        compile_every_width(fallback, scratch, f"compiling {_describe(model)} (jit)")
        return fallback
    return compiled_step(model, device)


def ahead_of_time_step(model: torch.nn.Module, device: torch.device) -> AotStep | None:
    """``model``'s package, loaded or built now; None (after one line on stderr) when it cannot be
    exported or the cache cannot hold it.
    Processes that need the same package take turns on its lock: one builds, the others wait and load it."""
    from specplan.models.cache_entry import EntryLock
    from specplan.runtime.compile import aot_store

    key = aot_store.package_key(model, device)
    folder = aot_store.package_folder(key)
    if aot_store.stale_reason(folder, key, model) is None:
        return aot_store.load_package(model, device, folder)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with EntryLock(folder):
            if not _build_if_stale(model, device, key, folder):
                return None
    except OSError as error:  # the cache cannot hold a package (read-only, full, not a folder)
        sys.stderr.write(f"specplan: cannot keep a compiled package in {folder.parent} "
                         f"({error.strerror or type(error).__name__}); compiling in this process instead (runtime jit)\n")
        return None
    return aot_store.load_package(model, device, folder)


def _build_if_stale(model: torch.nn.Module, device: torch.device, key, folder) -> bool:
    """Build the package unless another process built it meanwhile; whether one is there now
    (False: the model cannot be exported, and one line says so)."""
    from specplan.runtime.compile import aot_store

    name = _describe(model)
    reason = aot_store.stale_reason(folder, key, model)
    if reason is not None:
        why = "" if reason == "no package" else f" (the cached one is stale: {reason})"
        sys.stderr.write(f"specplan: compiling {name} ahead of time into {folder}{why}; "
                         "once per model, dtype, device and torch version (minutes on CPU)\n")
        try:
            seconds = aot_store.build_package(model, device, key, folder)
        except Exception as error:  # export/AOTInductor failures come in many types
            first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            sys.stderr.write(f"specplan: cannot compile {name} ahead of time ({type(error).__name__}: {first}); "
                             "compiling it in this process instead (runtime jit)\n")
            return False
        sys.stderr.write(f"specplan: compiled {name} ahead of time in {seconds:.0f} s\n")
    return True


@torch.inference_mode()
def compile_every_width(step: "CompiledStep | AotStep", cache: StaticKVCache, progress: str | None = None) -> float:
    """One step of every bucket's width over ``cache``, each trimmed back, so that every graph
    compiles now and none inside a timed prompt; the seconds spent compiling (``progress``: the
    label of a progress bar per width). The one place widths are compiled up front: a fallback
    step over a scratch cache (:func:`model_step`), a session's step before a timed run
    (:func:`specplan.runtime.compile.warmup.compile_buckets`)."""
    before, past = step.compile_seconds, cache.length
    for bucket in BUCKETS if progress is None else tqdm(BUCKETS, desc=progress, unit="width", leave=False):
        step.run(cache, [0] * bucket)
        cache.trim(past)
    return step.compile_seconds - before


@torch.inference_mode()
def _allocate(model: torch.nn.Module, device: torch.device, cache: StaticKVCache) -> None:
    """One eager forward of one token: it allocates the cache's buffers, as a session's prefill does."""
    cache.begin(1)
    model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device), past_key_values=cache, use_cache=True)
    cache.commit(1)


def _describe(model: torch.nn.Module) -> str:
    config = model.config.get_text_config(decoder=True)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    return f"{type(model).__name__} ({config.num_hidden_layers} layers, {dtype})"
