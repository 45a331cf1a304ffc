"""Options several verbs share: the runtime, the dtype, warnings as one line."""

from __future__ import annotations

import os
import sys

from specplan.core.runtime_modes import ENVIRONMENT_VARIABLE, RuntimeMode, runtime_from_environment


def add_runtime_option(parser, from_plan: bool = False) -> None:
    """``--runtime``; ``from_plan``: a verb that runs a plan defaults to the runtime its profile measured."""
    fallback = "the runtime the plan's profile measured" if from_plan else "eager"
    parser.add_argument("--runtime", choices=("eager", "static", "compiled", "jit"), default=None,
                        help="how models run: eager, static (preallocated KV cache), compiled "
                             "(static cache + steps compiled ahead of time: built once per model into "
                             "$SPECPLAN_CACHE/aot, minutes on CPU, then loaded in about a second; see "
                             "`specplan compile`), jit (torch.compile in every process); "
                             f"default: SPECPLAN_RUNTIME, else {fallback}")


def chosen_runtime(args) -> RuntimeMode | None:
    """``--runtime`` or ``SPECPLAN_RUNTIME`` if either is given; None leaves the choice to the
    plan (``run`` and ``bench`` then use the runtime its profile measured)."""
    if getattr(args, "runtime", None) or os.environ.get(ENVIRONMENT_VARIABLE, "").strip():
        return runtime_of(args)
    return None


def runtime_of(args) -> RuntimeMode:
    """``--runtime``, else ``SPECPLAN_RUNTIME``, else eager: the only place the variable is read."""
    return runtime_from_environment(getattr(args, "runtime", None))


def resolve_dtype(dtype: str) -> str:
    return "bfloat16" if dtype == "auto" else dtype




def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (e.g. a candidate the planner skipped) as one line each."""
    sys.stderr.write(f"specplan: warning: {message}\n")
