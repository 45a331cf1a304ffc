"""The ``specplan`` command line: profile, plan, run, serve, bench, roofline, predict, export, quantize,
distill, models, compile, cache (docs/formats.md, "Command line"). Each verb has a module of its name with
``add_parser`` and ``command``; a verb's variants (``plan --sku``, ``run --batch``, ...) live in
modules beside it.

Exit codes: 0 success; 2 bad input (one line on stderr saying what to change); 1 an
internal failure; 130 interrupted (Ctrl-C), 143 terminated (SIGTERM); 141 stdout closed early
(``specplan ... | head``), quietly. Files are written atomically (core/files.py), so none of
these leaves a half-written one. Heavy imports (torch, transformers) happen inside the verbs' commands so
that argument errors and ``specplan plan`` stay fast.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import warnings

from specplan.cli.options import show_warning
from specplan.core.quiet import quiet_libraries
from specplan.core.errors import SpecplanError

VERBS = ("profile", "plan", "run", "serve", "bench", "roofline", "predict", "export", "quantize", "distill", "models",
         "compile", "cache")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"specplan: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def _verb(name: str):
    return importlib.import_module(f"specplan.cli.{name}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specplan", description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="show library warnings and log lines")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in VERBS:
        _verb(name).add_parser(commands)
    return parser


class Terminated(BaseException):
    """SIGTERM, raised where the program is so that ``finally`` blocks and temporary files clean up."""


def _terminate(signum, frame) -> None:
    raise Terminated()


def _stdout_closed() -> int:
    """The reader of stdout went away (``| head``): stop quietly, without a flush error at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    quiet_libraries(args.verbose)
    warnings.showwarning = show_warning
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _run(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args) -> int:
    try:
        return _verb(args.handler).command(args)
    except BrokenPipeError:
        return _stdout_closed()
    except Terminated:
        sys.stderr.write("specplan: terminated\n")
        return 143
    except SpecplanError as error:
        sys.stderr.write(f"specplan: error: {error}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("specplan: interrupted\n")
        return 130
    except Exception as error:  # an internal failure: say so in one line unless debugging
        if os.environ.get("SPECPLAN_DEBUG"):
            raise
        sys.stderr.write(f"specplan: internal error: {type(error).__name__}: {error} (set SPECPLAN_DEBUG=1 for a traceback)\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
