"""Options several verbs share: the runtime, the dtype, bounded numbers, warnings as one line."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable

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


def integer(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type`` for an integer in ``[low, high]``: anything else is a usage error (exit
    2, one line) before the value reaches torch, numpy or llama.cpp.

    >>> integer(1, 8)("3"), integer(1, 8).high
    (3, 8)
    """
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer; use {low} to {high}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range; use {low} to {high}")
        return value

    parse.low, parse.high, parse.above_low = low, high, False  # type: ignore[attr-defined]
    return parse


def number(low: float, high: float, above_low: bool = False) -> Callable[[str], float]:
    """An argparse ``type`` for a finite number in ``[low, high]`` (``(low, high]`` if ``above_low``).

    >>> number(0.0, 1.0, above_low=True)("0.5")
    0.5
    """
    bound = f"above {low:g} and up to {high:g}" if above_low else f"from {low:g} to {high:g}"

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number; use one {bound}") from None
        if not math.isfinite(value) or value < low or value > high or (above_low and value == low):
            raise argparse.ArgumentTypeError(f"{text.strip()} is out of range; use a number {bound}")
        return value

    parse.low, parse.high, parse.above_low = low, high, above_low  # type: ignore[attr-defined]
    return parse


# Ranges shared by several verbs (docs/guide.md, "Files specplan writes, and the bounds on what it reads").
THREADS = integer(1, 1024)
SEED = integer(0, 2**32 - 1)  # numpy's and Python's seeds take 32 bits
NEW_TOKENS = integer(1, 131072)
PROMPTS = integer(1, 1_000_000)
TEMPERATURE = number(0.0, 100.0)



def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (e.g. a candidate the planner skipped) as one line each."""
    sys.stderr.write(f"specplan: warning: {message}\n")
