"""``specplan profile --latency-only --arch SHAPE``: latency curves of random-weight models, so a
model's T(n) is measured (and planned for) before its weights are downloaded."""

from __future__ import annotations

from pathlib import Path

from specplan.cli.batch_option import parse_batch_sizes
from specplan.cli.options import resolve_dtype, runtime_of
from specplan.cli.plan import solve_and_write
from specplan.core.errors import SpecplanError
from specplan.core.profile import load_profile, save_profile

MEASURING_FLAGS = ("target", "drafter", "prompts", "limit")


def _check_flags(args) -> None:
    """One-line errors for flag combinations that cannot mean anything here."""
    if not args.latency_only:
        raise SpecplanError("--arch and --acceptance-from go with --latency-only; add it")
    if not args.arch:
        raise SpecplanError("--latency-only needs --arch SHAPE (a named shape or a config JSON); the first is the target")
    given = [name for name in MEASURING_FLAGS if getattr(args, name) is not None]
    if given:
        flags = ", ".join(f"--{name}" for name in given)
        raise SpecplanError(f"{flags} measure real models; --latency-only measures --arch shapes only: drop {flags}")


def latency_only_command(args) -> int:
    _check_flags(args)
    from specplan.cli.profile import check_outputs
    from specplan.models.arch import resolve_arch

    from specplan.quant.backends import require_backend
    from specplan.quant.methods import normalize_quants, parse_method

    specs = [resolve_arch(value) for value in args.arch]
    quants = tuple(normalize_quants(args.quant))  # the target's precision first, then variants
    for quant in quants:
        if quant != "none":
            require_backend(parse_method(quant))  # a missing backend is one line before anything is built
    borrowed = load_profile(args.acceptance_from) if args.acceptance_from else None
    if borrowed is None and not args.no_plan:
        print("specplan: no --acceptance-from, so no plan is solved (latency curves only)")
        args.no_plan = True
    plan_path = check_outputs(args)

    from specplan.models.load import quiet_transformers
    from specplan.profiler.latency_only import LatencyOnlySettings, run_latency_only
    from specplan.profiler.run import ProfileSettings
    from specplan.runtime.timing import pick_device

    quiet_transformers()
    device = pick_device(args.device)
    dtype = resolve_dtype(args.dtype)
    settings = LatencyOnlySettings(dtype=dtype, runtime=runtime_of(args),
                                   repeats=ProfileSettings.quick().repeats if args.quick else ProfileSettings().repeats,
                                   batch_sizes=parse_batch_sizes(getattr(args, "batch_sizes", None)) or (1,),
                                   quants=quants)
    profile = run_latency_only(specs, device, settings, borrowed, str(args.acceptance_from or ""))
    save_profile(profile, args.output)
    print(f"specplan: wrote {args.output}")
    if plan_path is not None:
        solve_and_write(profile, Path(args.output), plan_path, max_budget=64, max_depth=None, temperature=0.0, explain=False)
    return 0

