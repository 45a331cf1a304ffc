"""The ``specplan`` command line: profile, plan, run, bench (formats.md, "Command line").

Exit codes: 0 success; 2 bad input (one line on stderr saying what to change); 1 an
internal failure. Heavy imports (torch, transformers) happen inside the commands so that
argument errors and ``specplan plan`` stay fast.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

from specplan.errors import SpecplanError


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"specplan: error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def _add_profile(commands) -> None:
    parser = commands.add_parser("profile", help="measure latency curves and acceptance, then write plan.yaml")
    parser.add_argument("--target", default="default", help="MODEL: `default`, a .gguf file, a directory or a hub id")
    parser.add_argument("--drafter", action="append", default=None, metavar="SPEC",
                        help="model:MODEL | layerskip:K | layerskip:0,2,4 | ngram:N (repeatable)")
    parser.add_argument("--quant", action="append", default=None, choices=["none", "nf4", "gptq"])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--prompts", help="JSONL calibration prompts (default: Spec-Bench calibration split)")
    parser.add_argument("--limit", type=int, default=None, help="calibration prompts to use (default 40, --quick 13)")
    parser.add_argument("--quick", action="store_true", help="trimmed calibration: a few minutes on 2 CPU cores")
    parser.add_argument("--no-plan", action="store_true", help="do not solve and write plan.yaml afterwards")
    parser.add_argument("-o", "--output", default="profile.yaml")
    _add_runtime_option(parser)
    parser.set_defaults(handler="profile")


def _add_plan(commands) -> None:
    parser = commands.add_parser("plan", help="solve for the fastest configuration from a profile")
    parser.add_argument("profile", help="profile.yaml written by `specplan profile`")
    parser.add_argument("-o", "--output", default=None, help="plan path (default: plan.yaml beside the profile)")
    parser.add_argument("--max-budget", type=int, default=64, help="largest tree budget (nodes) to consider")
    parser.add_argument("--max-depth", type=int, default=8, help="largest draft depth / gamma to consider")
    parser.add_argument("--temperature", type=float, default=0.0, help="decoding temperature the plan is for")
    parser.add_argument("--explain", action="store_true", help="print every candidate's cost terms")
    parser.add_argument("--stages", type=int, default=None, metavar="S",
                        help="take the best configuration with exactly S stages (e.g. 2: drafter -> middle model -> "
                             "target) instead of the overall best; its own prediction is written")
    parser.add_argument("--sku", default=None, metavar="NAME",
                        help="plan for a SKU of profiles/skus.yaml (h100-sxm, ...) or `all`: measured acceptance, "
                             "roofline latency; writes a plan marked as modelled (every shape and hierarchy searched)")
    parser.add_argument("--efficiency", type=float, default=None, metavar="E",
                        help="with --sku: fraction of peak bandwidth and compute the roofline assumes (default 1)")
    parser.add_argument("--fit-efficiency", action="store_true",
                        help="with --sku: fit the roofline's efficiency to PROFILE's measured curves (its own SKU)")
    parser.add_argument("--skus", default=None, metavar="FILE", help="SKU table (default: profiles/skus.yaml)")
    parser.set_defaults(handler="plan")


def _add_run(commands) -> None:
    parser = commands.add_parser("run", help="execute plan.yaml losslessly")
    parser.add_argument("plan", help="plan.yaml written by `specplan plan` or `specplan profile`")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--prompt", help="prompt text (default: a built-in demo prompt)")
    source.add_argument("--prompts", help="JSONL with `prompt` or `turns` per line")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=None, help="default: the plan's temperature")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON object per prompt on stdout")
    parser.add_argument("--stream", action="store_true", help="print text as it is committed")
    parser.add_argument("--compare-plain", action="store_true", help="also decode plainly and print the speedup")
    parser.add_argument("--force", action="store_true", help="run even if the profile's device or model differ")
    _add_runtime_option(parser)
    parser.set_defaults(handler="run")


def _add_bench(commands) -> None:
    parser = commands.add_parser("bench", help="measure a plan against plain decoding, transformers' peers and the grid")
    parser.add_argument("plan", help="plan.yaml written by `specplan plan` or `specplan profile`")
    parser.add_argument("--prompts", help="JSONL prompts (default: Spec-Bench evaluation split)")
    parser.add_argument("--limit", type=int, default=26, help="prompts to use, spread over categories")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="new tokens per prompt, the same for every method")
    parser.add_argument("--baselines", default="plain,hf-assisted,hf-lookup",
                        help="comma list of plain, plain-runtime, hf-assisted, hf-lookup, grid (plain is always run)")
    parser.add_argument("--assistant", default=None, metavar="ID",
                        help="profile drafter network for hf-assisted when the plan has none (e.g. layerskip-20)")
    parser.add_argument("--grid-gammas", default="2-8", help="draft lengths of the grid: a range 2-8 or a list 2,4,8")
    parser.add_argument("--grid-limit", type=int, default=4, help="prompts the grid runs on (the first, spread over categories)")
    parser.add_argument("--grid-budgets", default="4,8,16,32",
                        help="tree budgets of the grid: each drafter alone as the planner's best tree within each budget")
    parser.add_argument("--grid-min-speedup", type=float, default=0.5,
                        help="skip grid points the planner predicts slower than this fraction of plain decoding")
    parser.add_argument("--report", default=None, help="folder for report.md, report.json and the plots")
    parser.add_argument("--no-plots", action="store_true", help="write the report without PNG plots (no matplotlib)")
    parser.add_argument("--force", action="store_true", help="run even if the profile's device or model differ")
    _add_runtime_option(parser)
    parser.set_defaults(handler="bench")


def _add_roofline(commands) -> None:
    parser = commands.add_parser("roofline", help="the roofline latency model's error per n against a measured profile")
    parser.add_argument("profile", help="profile.yaml measured by `specplan profile`")
    parser.add_argument("--sku", default=None, help="SKU whose figures describe the measuring device (default: its sku)")
    parser.add_argument("--fit", action="store_true", help="also fit efficiencies and overheads and show the fitted error")
    parser.add_argument("--save-calibration", default=None, metavar="FILE", help="with --fit: write the fit as JSON")
    parser.add_argument("--skus", default=None, metavar="FILE", help="SKU table (default: profiles/skus.yaml)")
    parser.set_defaults(handler="roofline")


def _add_export(commands) -> None:
    parser = commands.add_parser("export", help="print a serving engine's config for a plan, re-solved for the engine")
    parser.add_argument("plan", help="plan.yaml written by `specplan plan` (with or without --sku)")
    parser.add_argument("--engine", required=True, help="vllm | sglang | transformers | llama.cpp")
    parser.add_argument("--max-budget", type=int, default=64, help="largest tree budget (nodes) to consider")
    parser.add_argument("--max-depth", type=int, default=8, help="largest draft depth / gamma to consider")
    parser.add_argument("--json", action="store_true", help="one JSON object with the config, both plans and the loss")
    parser.set_defaults(handler="export")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specplan", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    from specplan.quant.command import add_quantize_parser
    from specplan.runtime.distill.command import add_distill_parser

    for add in (_add_profile, _add_plan, _add_run, _add_bench, _add_roofline, _add_export, add_quantize_parser,
                add_distill_parser):
        add(commands)
    return parser


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (e.g. a candidate the planner skipped) as one line each."""
    sys.stderr.write(f"specplan: warning: {message}\n")


def _add_runtime_option(parser) -> None:
    parser.add_argument("--runtime", choices=("eager", "static", "compiled"), default=None,
                        help="how models run: eager (default), static (preallocated KV cache), compiled "
                             "(static cache + torch.compile'd steps; compiles once per model, minutes on CPU); "
                             "same as SPECPLAN_RUNTIME")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.showwarning = _show_warning
    if getattr(args, "runtime", None):
        os.environ["SPECPLAN_RUNTIME"] = args.runtime  # read once per session (runtime/modes.py)
    try:
        from specplan import commands

        return getattr(commands, f"command_{args.handler}")(args)
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
