"""Options several verbs share: the runtime, the dtype, warnings as one line."""

from __future__ import annotations

import sys

from specplan.core.runtime_modes import RuntimeMode, runtime_from_environment


def add_runtime_option(parser) -> None:
    parser.add_argument("--runtime", choices=("eager", "static", "compiled"), default=None,
                        help="how models run: eager (default), static (preallocated KV cache), compiled "
                             "(static cache + torch.compile'd steps; compiles once per model, minutes on CPU); "
                             "default: SPECPLAN_RUNTIME, else eager")


def runtime_of(args) -> RuntimeMode:
    """``--runtime``, else ``SPECPLAN_RUNTIME``, else eager: the only place the variable is read."""
    return runtime_from_environment(getattr(args, "runtime", None))


def resolve_dtype(dtype: str) -> str:
    return "bfloat16" if dtype == "auto" else dtype




def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (e.g. a candidate the planner skipped) as one line each."""
    sys.stderr.write(f"specplan: warning: {message}\n")
