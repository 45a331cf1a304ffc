"""``specplan profile``: measure latency curves and acceptance, write profile.yaml, then solve plan.yaml."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from specplan.cli.batch_option import add_batch_sizes_option, parse_batch_sizes
from specplan.cli.options import PROMPTS, THREADS, add_runtime_option, integer, resolve_dtype, runtime_of
from specplan.cli.plan import solve_and_write
from specplan.core.backends import BACKEND_NAMES, traits
from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.errors import SpecplanError
from specplan.core.limits import MAX_CONTEXT, MIN_CONTEXT
from specplan.core.outputs import check_output_file, stored_kind
from specplan.core.plan import load_plan, plan_floor
from specplan.core.profile import save_profile
from specplan.core.prompts import PROFILE_PROMPTS, QUICK_PROMPTS, held_out_split, profile_prompts, read_prompts, stratified
from specplan.core.workloads import WORKLOADS, workload_split


def add_parser(commands) -> None:
    parser = commands.add_parser("profile", help="measure latency curves and acceptance, then write plan.yaml")
    parser.add_argument("--target", default=None, help="MODEL: `default` (the default), a .gguf file, a directory or a hub id")
    parser.add_argument("--drafter", action="append", default=None, metavar="SPEC",
                        help="model:MODEL | layerskip:K | layerskip:0,2,4 | ngram:N (repeatable)")
    parser.add_argument("--quant", action="append", default=None, choices=["none", "nf4", "gptq"])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--prompts", help="JSONL prompts: calibrate on half of them and report the plan's predicted speed "
                                           "on the other half (default: the workload's calibration split)")
    parser.add_argument("--no-held-out", action="store_true",
                        help="with --prompts: calibrate on every prompt of the file, holding none out")
    parser.add_argument("--workload", default="spec-bench", choices=WORKLOADS,
                        help="calibration prompts: Spec-Bench (default) or HumanEval's calibration split")
    parser.add_argument("--limit", type=PROMPTS, default=None, help="calibration prompts to use (default 40, --quick 13)")
    parser.add_argument("--quick", action="store_true", help="trimmed calibration: a few minutes on 2 CPU cores")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the latency curves an interrupted profile of the same models, device and settings "
                             "left beside -o (.NAME.curves.yaml) instead of timing them again")
    parser.add_argument("--no-plan", action="store_true", help="do not solve and write plan.yaml afterwards")
    parser.add_argument("-o", "--output", default="profile.yaml", help="profile path (default: profile.yaml)")
    parser.add_argument("--plan", default=None, metavar="PATH",
                        help="where the plan goes (default: plan.yaml beside the profile; an existing one there is "
                             "replaced only if it was solved from this profile path)")
    parser.add_argument("--latency-only", action="store_true",
                        help="measure T(n) only, of --arch shapes with random weights (no model download)")
    parser.add_argument("--arch", action="append", default=None, metavar="SHAPE",
                        help="with --latency-only: a named shape (llama-3-8b, llama-3-70b, qwen2.5-1.5b, ...) or a "
                             "config JSON; the first is the target, the rest drafters (repeatable)")
    parser.add_argument("--acceptance-from", default=None, metavar="PROFILE",
                        help="with --latency-only: copy acceptance from this measured profile (its target and "
                             "model drafters stand for the --arch shapes, in order); without it no plan is solved")
    parser.add_argument("--engine", default=None, choices=["llama.cpp"],
                        help="measure T(n) with this serving engine (llama-cpp-python) on the models' GGUF files; "
                             "acceptance and drafters come from --acceptance-from PROFILE")
    parser.add_argument("--backend", default="auto", choices=["auto", *BACKEND_NAMES],
                        help="the runtime whose costs are measured and whose plans `run` executes: llama.cpp (the GGUF "
                             "files as they are, through llama-cpp-python; docs/backends.md) or torch; auto (default): "
                             "llama.cpp for a GGUF target on the CPU with GGUF or retrieval drafters, else torch")
    parser.add_argument("--threads", type=THREADS, default=None,
                        help="with --engine or --backend llama.cpp: llama.cpp's CPU threads (default: every core, as llama-server; on a "
                             "machine others use, 1: llama.cpp's threads wait for each other by spinning)")
    parser.add_argument("--numerics", default=None, choices=["exact", "fast"],
                        help="with --backend llama.cpp: fast (default): llama.cpp's own kernels and settings, every "
                             "thread, so plain decoding is llama.cpp's own and an output may part from it only at a "
                             "near-tie; exact: every verify gives the logits of one-token decodes bit for bit, at the "
                             "cost of one-token decodes on one thread (docs/backends.md)")
    parser.add_argument("--flash-attention", default="llama.cpp", choices=["llama.cpp", "measure", "off"],
                        help="with --backend llama.cpp and fast numerics: llama.cpp (default): its own choice; off: "
                             "without it (plain tokens may cost much less, but verify rows then part further from "
                             "one-token rows: docs/backends.md, \"Flash attention\"); measure: off where a plain token "
                             "is measured at least 10%% cheaper without it")
    parser.add_argument("--context", type=integer(MIN_CONTEXT, MAX_CONTEXT), default=None, metavar="TOKENS",
                        help="cached tokens under each latency measurement (default: three caches, the medians of "
                             "three equal shares of the positions the calibration prompts' answers are decoded at, averaged; a "
                             "small model's forward costs more over a longer cache)")
    add_batch_sizes_option(parser, "also measure T(n, b): forwards of b sequences x n tokens each at these batch "
                                   "sizes (e.g. 1,2,4,8,16,32; batch 1 always; stops where memory runs out); "
                                   "`specplan plan` then writes a schedule per batch size")
    add_runtime_option(parser)
    parser.set_defaults(handler="profile")


def _solved_from(plan_path: Path) -> Path | None:
    """The profile an existing plan was solved from, resolved; None if unreadable."""
    try:
        return (plan_path.resolve().parent / load_plan(plan_path).profile_path).resolve()
    except SpecplanError:
        return None


def check_outputs(args) -> Path | None:
    """The profile and plan locations, before anything is measured; the plan's path (None: --no-plan)."""
    output = check_output_file(args.output, kind="profile", inputs=[args.prompts] if args.prompts else [])
    if args.no_plan:
        return None
    plan_path = Path(args.plan) if args.plan else output.with_name("plan.yaml")
    if plan_path.resolve() == output.resolve():
        if args.plan:
            raise SpecplanError(f"--plan {plan_path} is the profile's own path (-o); pass another plan path")
        raise SpecplanError(f"-o {output} is where the plan would go; name the profile another way "
                            "(e.g. -o profile.yaml) or pass --plan PATH or --no-plan")
    check_output_file(plan_path, kind="plan", flag="--plan" if args.plan else "the plan", inputs=[output])
    if not args.plan and stored_kind(plan_path) is not None and _solved_from(plan_path) != output.resolve():
        raise SpecplanError(f"{plan_path} exists and was not solved from {output}; pass --plan PATH for the new plan, "
                            f"--no-plan, or delete {plan_path} first")
    return plan_path


def torch_only_options(args, batch_sizes: tuple[int, ...]) -> list[str]:
    """The options given that only the torch backend honours."""
    drafters = [parse_drafter_spec(spec) for spec in (args.drafter or ())]
    refused = [(args.quant and args.quant != ["none"], "--quant (a GGUF file is already quantised)"),
               (args.device == "cuda", "--device cuda (the llama.cpp backend runs on the CPU here)"),
               (batch_sizes != (1,), "--batch-sizes (batched plans run on the torch backend)"),
               (args.dtype != "auto", "--dtype (llama.cpp computes in the GGUF file's own types)"),
               (any(spec.kind in ("layerskip", "head") for spec in drafters),
                "layerskip: or head: drafters (they read the torch model's layers)")]
    return [option for bad, option in refused if bad]


def resolve_backend(args, batch_sizes: tuple[int, ...]) -> str:
    """``--backend auto``: llama.cpp, the engine a GGUF user already runs, when the target is a GGUF file,
    the device the CPU and no option needs torch; else torch (docs/guide.md, "Which backend")."""
    if args.backend in BACKEND_NAMES:
        return args.backend
    from specplan.core.errors import ModelError
    from specplan.models.load import gguf_file

    try:
        gguf = gguf_file(args.target or "default")
    except ModelError:
        return "torch"  # the torch path reports the bad target in its own words
    cpu = args.device == "cpu" or (args.device == "auto" and not _cuda_available())
    if gguf is None or not cpu or torch_only_options(args, batch_sizes) or not _llama_cpp_installed():
        return "torch"
    return "llama.cpp"


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _llama_cpp_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("llama_cpp") is not None


def check_backend_options(args, batch_sizes: tuple[int, ...]) -> None:
    """Options the llama.cpp backend cannot honour, refused in one line before anything loads."""
    if not traits(args.backend).kernel_settings:
        if args.threads is not None:
            raise SpecplanError("--threads sets llama.cpp's threads; pass it with --backend llama.cpp or --engine llama.cpp")
        if args.numerics is not None:
            raise SpecplanError("--numerics chooses the llama.cpp backend's kernels; pass it with --backend llama.cpp "
                                "(torch plans are token-identical in float32)")
        if args.flash_attention != "llama.cpp":
            raise SpecplanError("--flash-attention chooses the llama.cpp backend's attention; pass it with --backend llama.cpp")
        return
    if args.flash_attention != "llama.cpp" and args.numerics == "exact":
        raise SpecplanError("--flash-attention applies to fast numerics; exact numerics keep flash attention on "
                            "(their bit identity rests on it): drop one of the two")
    for option in torch_only_options(args, batch_sizes):
        raise SpecplanError(f"--backend llama.cpp does not take {option}; drop it or use --backend torch")


def command(args) -> int:
    if args.context is not None and (args.engine or args.latency_only or args.arch or args.acceptance_from):
        raise SpecplanError("--context applies to a full profile; drop it with --engine, --latency-only, --arch "
                            "or --acceptance-from")
    if args.numerics is not None and (args.engine or args.latency_only or args.arch or args.acceptance_from):
        raise SpecplanError("--numerics applies to a full profile on --backend llama.cpp; drop it with --engine, "
                            "--latency-only, --arch or --acceptance-from")
    if args.resume and (args.engine or args.latency_only or args.arch or args.acceptance_from):
        raise SpecplanError("--resume applies to a full profile; drop it with --engine, --latency-only, --arch "
                            "or --acceptance-from")
    if args.engine:
        from specplan.cli.profile_engine import engine_profile_command

        return engine_profile_command(args)
    if args.latency_only or args.arch or args.acceptance_from:
        from specplan.cli.profile_latency import latency_only_command

        return latency_only_command(args)
    batch_sizes = parse_batch_sizes(args.batch_sizes) or (1,)
    args.backend = resolve_backend(args, batch_sizes)
    check_backend_options(args, batch_sizes)
    plan_path = check_outputs(args)
    defaults = traits(args.backend).default_drafters
    specs = [parse_drafter_spec(spec) for spec in (args.drafter or defaults)]
    ids = [spec.id for spec in specs]
    if len(set(ids)) != len(ids):
        twice = sorted({name for name in ids if ids.count(name) > 1})
        raise SpecplanError(f"--drafter names {', '.join(twice)} twice; give each drafter once")
    from specplan.quant.methods import normalize_quants

    quants = normalize_quants(args.quant)  # first = the target's precision, the rest: variants (docs/guide.md, "4-bit targets")
    if args.resume and quants != ["none"]:
        raise SpecplanError("--resume applies to a 16-bit or GGUF target; a --quant profile measures its curves again")
    limit = args.limit or (QUICK_PROMPTS if args.quick else PROFILE_PROMPTS)
    prompts, held_out = calibration_prompts(args, limit)

    from specplan.models.load import quiet_transformers
    from specplan.profiler.curve_checkpoint import checkpoint_path
    from specplan.profiler.run import ProfileSettings, run_profile
    from specplan.runtime.timing import pick_device

    quiet_transformers()
    device = pick_device(args.device)
    settings = ProfileSettings.quick() if args.quick else ProfileSettings()
    settings = replace(settings, runtime=runtime_of(args), batch_sizes=batch_sizes, flash_attention=args.flash_attention)
    checkpoint = checkpoint_path(args.output)
    if args.context is not None:
        settings = replace(settings, context=args.context)
    if args.prompts:
        settings = replace(settings, prompts_label=str(args.prompts) + (f" ({HALF_LABEL[0]})" if held_out else ""))
    elif args.workload != "spec-bench":
        settings = replace(settings, prompts_label=f"{args.workload}:calibration")
    if quants == ["none"]:  # (a --quant variant is refused on llama.cpp: check_backend_options)
        from specplan.runtime.backends import backend_for

        backend = backend_for(args.backend)
        if backend.profile_note:
            print(backend.profile_note)
        target = backend.load_target(args.target or "default", resolve_dtype(args.dtype), device, args.threads or 0,
                                     exact=args.numerics == "exact")
        profile = run_profile(target, specs, prompts, device, settings, checkpoint, args.resume)
    else:
        from specplan.profiler.variants import profile_variants

        profile = profile_variants(args.target or "default", quants, specs, prompts, device, settings, resolve_dtype(args.dtype))
    save_profile(profile, args.output)
    checkpoint.unlink(missing_ok=True)  # the curves are in the profile now
    print(f"specplan: wrote {args.output}")
    if profile.target.wide_from:
        print(f"specplan: the target verifies chains of {profile.target.wide_from} tokens or more on a second, "
              "unrepacked copy of its weights, faster there on this CPU (docs/backends.md)")
    if plan_path is not None:
        plan = solve_and_write(profile, Path(args.output), plan_path, max_budget=64, max_depth=None, temperature=0.0,
                               explain=False)
        if held_out and quants == ["none"]:
            from specplan.profiler.run import held_out_acceptance

            held = held_out_acceptance(target, specs, held_out, device,
                                       replace(settings, prompts_label=f"{args.prompts} ({HALF_LABEL[1]})"), profile)
            print(held_out_line(plan, profile, held, args.prompts, plan_path))
        elif held_out:
            print(f"specplan: {len(held_out)} prompts of {args.prompts} held out; measure the plan on them with "
                  f"`specplan bench {plan_path} --prompts {args.prompts} --held-out`")
    elif held_out:
        print(f"specplan: {len(held_out)} prompts of {args.prompts} held out; with a plan (drop --no-plan) profile "
              "reports its predicted speed on them")
    return 0


HALF_LABEL = ("calibration half", "held-out half")


def calibration_prompts(args, limit: int) -> tuple[list, list]:
    """(calibration prompts, held-out prompts): a user's file is split in two halves (core/prompts.py
    ``held_out_split``) unless ``--no-held-out``; the workloads' own calibration splits hold none out."""
    if not args.prompts:
        if args.no_held_out:
            raise SpecplanError("--no-held-out goes with --prompts FILE; drop it (the workloads' calibration splits "
                                "are already apart from their evaluation splits)")
        if args.workload == "spec-bench":
            return profile_prompts(limit), []
        return stratified(workload_split(args.workload, "calibration"), limit), []
    rows = read_prompts(args.prompts)
    calibration, held_out = (rows, []) if args.no_held_out else held_out_split(rows)
    return stratified(calibration, limit), stratified(held_out, limit)


def held_out_line(plan, profile, held, prompts_file: str, plan_path: Path) -> str:
    """The plan's predicted speed on the held-out prompts beside the calibration half's, against the floor."""
    from specplan.planner.recheck import recost

    floor_name, floor_ms = plan_floor(plan) or ("plain decoding", plan.predicted.ms_per_token * plan.predicted.speedup)
    held_ms = recost(plan, held)
    count = held.calibration.get("count")
    if held_ms is None:
        what = ("plain decoding, the same on them" if not plan.stages else
                "no closed form for a tree grown at run time; measure it")
    else:
        what = (f"{1000.0 / held_ms:.1f} tok/s on them, {floor_ms / held_ms:.2f}x {floor_name} "
                f"({1000.0 / plan.predicted.ms_per_token:.1f} tok/s on the {profile.calibration.get('count')} it was "
                "calibrated on)")
    return (f"specplan: {count} prompts of {prompts_file} held out of calibration: the plan predicts {what}; "
            f"measure it with `specplan bench {plan_path} --prompts {prompts_file} --held-out`")

