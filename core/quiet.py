"""Quiet start: library log lines and warnings that say nothing about the user's work.

Set before anything heavy is imported (torch's pytree registry logs as torchao registers its
types, and transformers imports torchao whenever it is installed, 4-bit model or not).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings

# Loggers of libraries that print on import or load whatever the command does: torchao (which
# transformers imports whenever it is installed, a 4-bit model or not), torch's pytree registry
# (called by torchao), bitsandbytes' optional kernels, transformers itself.
IMPORT_NOISE = ("torchao", "torch.utils._pytree", "bitsandbytes")
LIBRARY_LOGGERS = (*IMPORT_NOISE, "transformers", "gptqmodel", "logbar", "optimum", "accelerate", "huggingface_hub")
_QUIET = {"on": False, "imports": False}  # quiet_libraries(verbose=False), quiet_import_noise() ran


def quiet_import_noise() -> None:
    """Only the import-time chatter of the 4-bit backends' dependencies (what the API does)."""
    _QUIET["imports"] = True
    for name in IMPORT_NOISE:
        logging.getLogger(name).setLevel(logging.ERROR)


def quiet_libraries(verbose: bool) -> None:
    """Before anything heavy is imported: library log lines and warnings only with ``--verbose``.

    The program's own warnings (``specplan: warning: ...``) always show."""
    if verbose:
        return
    # huggingface_hub sets its own level on import from this variable (its "Retrying in 8s" lines
    # for an unreachable hub id: 26 lines before the one-line error).
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")
    _QUIET["on"] = True
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    for module in ("torch", "torchao", "transformers", "bitsandbytes", "gptqmodel", "optimum", "accelerate", "tqdm"):
        warnings.filterwarnings("ignore", module=module)


def quiet_again() -> None:
    """After importing a library that resets its logger at import (GPTQModel's ``logbar``, whose
    INFO lines otherwise run through ``quantize`` and ``bench``): the quiet levels again, if the
    process asked for quiet."""
    if _QUIET["on"]:
        for name in LIBRARY_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)


@contextlib.contextmanager
def banner_hidden():
    """While a 4-bit backend is imported: GPTQModel logs a banner (its logo and the library
    versions) and INFO lines at import through logbar's shared logger, which sets itself to INFO
    when it is first made. It is made here first, at ERROR (its own blank first line dropped), so
    that the import shows errors only; afterwards it stays at ERROR where the process asked for
    quiet, and goes back to INFO where only the import chatter was to be hidden (the API).
    With ``--verbose`` nothing changes."""
    if not (_QUIET["on"] or _QUIET["imports"]):
        yield
        return
    shared = _logbar_at_error()
    try:
        yield
    finally:
        if shared is not None and not _QUIET["on"]:
            shared.setLevel(logging.INFO)


def _logbar_at_error():
    """logbar's shared logger at ERROR, made now if it is not yet; None without logbar."""
    try:
        from logbar import LogBar
    except ImportError:
        return None
    with contextlib.redirect_stdout(io.StringIO()):  # made first: a blank line and a headless notice
        shared = LogBar.shared()
    shared.setLevel(logging.ERROR)
    return shared
