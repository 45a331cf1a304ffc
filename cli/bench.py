"""``specplan bench PLAN``: argument checks, prompts, the run, the report and its plots."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from specplan.cli.options import NEW_TOKENS, PROMPTS, THREADS, add_runtime_option, chosen_runtime, number
from specplan.core.contract import check_comparable, load_plan_and_profile
from specplan.core.errors import SpecplanError
from specplan.core.limits import LONGEST_LOOKUP_CHAIN
from specplan.core.outputs import check_output_folder
from specplan.core.prompts import MIN_HELD_OUT_FILE, held_out_split, read_prompts, stratified
from specplan.core.workloads import WORKLOADS, workload_split


def add_parser(commands) -> None:
    parser = commands.add_parser("bench", help="measure a plan against plain decoding, transformers' peers and the grid")
    parser.add_argument("plan", help="plan.yaml written by `specplan plan` or `specplan profile`")
    parser.add_argument("--prompts", help="JSONL prompts (default: the workload's evaluation split)")
    parser.add_argument("--held-out", action="store_true",
                        help="with --prompts: only the half of the file `specplan profile --prompts` held out of calibration")
    parser.add_argument("--workload", default="spec-bench", choices=WORKLOADS,
                        help="evaluation prompts: Spec-Bench (default) or HumanEval's evaluation split")
    parser.add_argument("--limit", type=PROMPTS, default=26, help="prompts to use, spread over categories")
    parser.add_argument("--max-new-tokens", type=NEW_TOKENS, default=128, help="new tokens per prompt, the same for every method")
    parser.add_argument("--baselines", default="plain,hf-assisted,hf-lookup",
                        help="comma list of plain, plain-runtime, plan-no-fallback, plan-fixed-chain, hf-assisted, hf-lookup, "
                             "llama.cpp, llama.cpp-lookup, grid "
                             "(plain is always run; llama.cpp needs the llamacpp extra); with a plan on the llama.cpp "
                             "backend also llama-server, llama-server-draft[:N], llama-server-ngram, llama-server-ngram-map-k, "
                             "-ngram-map-k4v, -ngram-mod, -ngram-cache (llama.cpp's own server: scripts/build-llama-server.sh)")
    parser.add_argument("--also", action="append", default=None, metavar="NAME=PLAN",
                        help="another plan of the same target, interleaved in the same run as the method plan:NAME "
                             "(e.g. a plan calibrated on another workload; repeatable)")
    parser.add_argument("--assistant", default=None, metavar="ID",
                        help="profile drafter network for hf-assisted when the plan has none (e.g. layerskip-20)")
    parser.add_argument("--grid-gammas", default="2-8", help="draft lengths of the grid: a range 2-8 or a list 2,4,8")
    parser.add_argument("--grid-limit", type=PROMPTS, default=4, help="prompts the grid runs on (the first, spread over categories)")
    parser.add_argument("--grid-budgets", default="4,8,16,32",
                        help="tree budgets of the grid: each drafter alone as the planner's best tree within each budget")
    parser.add_argument("--grid-min-speedup", type=number(0.0, 100.0), default=0.5,
                        help="skip grid points the planner predicts slower than this fraction of plain decoding")
    parser.add_argument("--report", default=None, help="folder for report.md, report.json and the plots")
    parser.add_argument("--no-plots", action="store_true", help="write the report without PNG plots (no matplotlib)")
    parser.add_argument("--force", action="store_true", help="run even if the profile's device or model differ")
    parser.add_argument("--batch", default=None, metavar="B,B,...",
                        help="instead: whole-batch tokens/s at these batch sizes (the schedule's choice, the batch-1 plan, "
                             "plain decoding batched) beside the schedule's prediction")
    parser.add_argument("--at-profile-context", action="store_true",
                        help="with --batch: make every prompt exactly as long as the context the schedule was "
                             "profiled at (the prompts before it fill the rest) and decode every sequence to "
                             "--max-new-tokens (EOS does not stop it), so measured and predicted compare")
    parser.add_argument("--engine", default=None, choices=["llama.cpp", "transformers"],
                        help="instead: the plan exported for this engine, run in it (llama-cpp-python, or transformers' "
                             "generate) against its plain decoding on the same prompts, measured beside the export's "
                             "prediction")
    parser.add_argument("--json", action="store_true", help="with --engine: one JSON object instead of the table")
    parser.add_argument("--no-fallback", action="store_true",
                        help="the plan's rows play the plan every round (default: plain decoding plays the rounds "
                             "where speculation is measured not to pay, as `specplan run` does)")
    parser.add_argument("--threads", type=THREADS, default=None,
                        help="CPU threads: llama.cpp's for a llama.cpp plan, its plain decoding and llama-server, "
                             "or with --engine (default every core, as llama-server; 1 on a shared machine); torch's "
                             "for a torch plan or transformers (default torch's own)")
    add_runtime_option(parser, from_plan=True)
    parser.set_defaults(handler="bench")



def _baselines(text: str) -> tuple[str, ...]:
    from specplan.bench.llama_server_peer import is_llama_server_name, parse_peer
    from specplan.bench.run import BASELINES

    names = tuple(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    for name in filter(is_llama_server_name, names):
        parse_peer(name)  # llama-server, llama-server-draft:N, ...: one line for a name that is not one
    unknown = [name for name in names if name not in BASELINES and not is_llama_server_name(name)]
    if unknown:
        raise SpecplanError(f"unknown baseline(s) {', '.join(unknown)}; choose from {','.join(BASELINES)}")
    return names


def _gammas(text: str) -> tuple[int, ...]:
    try:
        if "-" in text and "," not in text:
            low, high = (int(part) for part in text.split("-", 1))
            gammas = tuple(range(low, high + 1))
        else:
            gammas = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SpecplanError(f"--grid-gammas {text!r} must be a range like 2-8 or a list like 2,4,8") from None
    if not gammas or min(gammas) < 1 or max(gammas) > LONGEST_LOOKUP_CHAIN:
        raise SpecplanError(f"--grid-gammas {text!r} must name draft lengths between 1 and {LONGEST_LOOKUP_CHAIN}")
    return gammas


def _budgets(text: str) -> tuple[int, ...]:
    """Tree budgets of the grid from ``--grid-budgets 4,8,16,32``."""
    try:
        budgets = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise SpecplanError(f"--grid-budgets {text!r} must be a list of tree sizes like 4,8,16,32") from None
    if not budgets or min(budgets) < 2 or max(budgets) > 64:
        raise SpecplanError(f"--grid-budgets {text!r} must name tree budgets between 2 and 64 nodes")
    return budgets


def _assistant(profile, name: str | None) -> str | None:
    """A profile drafter network's id from --assistant ID or SPEC."""
    if name is None:
        return None
    for model in profile.models:
        if model.role != "target" and name in (model.id, model.source):
            return model.id
    networks = [m.id for m in profile.models if m.role != "target"]
    raise SpecplanError(f"--assistant {name!r} is not a drafter network of the profile; choose one of: "
                        f"{', '.join(networks) or 'none (profile with --drafter layerskip:K or model:MODEL)'}")


def bench_prompts(args) -> tuple[list, str]:
    """The prompts to bench and where they come from: a file (or its held-out half), or a workload's evaluation split."""
    if args.held_out and not args.prompts:
        raise SpecplanError("--held-out picks the held-out half of --prompts FILE; add --prompts or drop it "
                            "(a workload's evaluation split is already held out)")
    if not args.prompts:
        return workload_split(args.workload, "evaluation"), {"spec-bench": "Spec-Bench evaluation split"}.get(
            args.workload, f"{args.workload} evaluation split")
    prompts = read_prompts(args.prompts)
    if not args.held_out:
        return prompts, str(args.prompts)
    held_out = held_out_split(prompts)[1]
    if not held_out:
        raise SpecplanError(f"{args.prompts} has {len(prompts)} prompts, too few to hold any out (at least "
                            f"{MIN_HELD_OUT_FILE}); drop --held-out")
    return held_out, f"{args.prompts} (held-out half)"


def _also(items: list[str] | None, reference) -> tuple:
    """``--also NAME=PLAN`` items: (name, plan, profile) each, read before any model loads."""
    also, names = [], set()
    for item in items or ():
        name, _, path = item.partition("=")
        if not name or not path or not name.replace("-", "").replace("_", "").isalnum() or name in names:
            raise SpecplanError(f"--also {item!r}: give NAME=PLAN with a new name of letters, digits, - or _ "
                                "(e.g. --also edit=plans/edit/plan.yaml)")
        plan, profile, _ = load_plan_and_profile(path)
        check_comparable(name, profile, reference)
        also.append((name, plan, profile))
        names.add(name)
    return tuple(also)


def _command_line(args) -> str:
    """The command, rebuilt from the parsed arguments (every setting explicit), for the report."""
    parts = ["specplan", "bench", args.plan]
    if args.prompts:
        parts += ["--prompts", args.prompts] + (["--held-out"] if args.held_out else [])
    elif args.workload != "spec-bench":
        parts += ["--workload", args.workload]
    parts += ["--limit", args.limit, "--max-new-tokens", args.max_new_tokens, "--baselines", args.baselines]
    if "grid" in args.baselines:
        parts += ["--grid-gammas", args.grid_gammas]
        parts += ["--grid-budgets", args.grid_budgets]
        parts += ["--grid-limit", args.grid_limit, "--grid-min-speedup", args.grid_min_speedup]
    for item in args.also or ():
        parts += ["--also", item]
    for flag, value in (("--assistant", args.assistant), ("--report", args.report)):
        if value:
            parts += [flag, value]
    if args.threads:
        parts += ["--threads", args.threads]
    parts += [flag for flag, on in (("--no-plots", args.no_plots), ("--force", args.force)) if on]
    return " ".join(shlex.quote(str(part)) for part in parts)


def command(args) -> int:

    if args.at_profile_context and args.batch is None:
        raise SpecplanError("--at-profile-context goes with --batch B,B,...; add --batch or drop it")
    if args.also and (args.engine is not None or args.batch is not None):
        raise SpecplanError("--also interleaves plans in the plan's own runtime; drop it with --engine or --batch")
    if args.engine is not None:
        from specplan.cli.bench_engine import bench_engine

        return bench_engine(args)
    if args.batch is not None:
        from specplan.cli.bench_batched import bench_batched

        return bench_batched(args)
    baselines = _baselines(args.baselines)
    gammas = _gammas(args.grid_gammas)
    budgets = _budgets(args.grid_budgets)
    plan, profile, profile_path = load_plan_and_profile(args.plan)
    assistant = _assistant(profile, args.assistant)
    also = _also(args.also, profile)
    prompts, source = bench_prompts(args)
    prompts = stratified(prompts, args.limit)
    if args.report:
        check_output_folder(args.report, flag="--report")
    plots = bool(args.report) and not args.no_plots
    if plots:
        from specplan.bench.plots import require_matplotlib

        require_matplotlib()  # fail before the long run, not after it
    if any(name.startswith("llama.cpp") for name in baselines):
        from specplan.bench.llamacpp_peer import require_llama_cpp

        require_llama_cpp()  # before the models load

    from specplan.bench.run import BenchSettings, run_bench
    from specplan.models.load import quiet_transformers
    from specplan.runtime.runner import PlanRunner

    quiet_transformers()
    settings = BenchSettings(max_new_tokens=args.max_new_tokens, baselines=baselines, grid_gammas=gammas,
                             grid_budgets=budgets, grid_limit=args.grid_limit,
                             grid_min_speedup=args.grid_min_speedup, assistant=assistant, also=also)
    if args.threads:  # torch's for the process; llama.cpp's go to each session as it opens
        from specplan.runtime.backends import backend_for

        backend_for(profile.backend).set_threads(args.threads)
    runner = PlanRunner.open(plan, profile, profile_path, force=args.force, runtime=chosen_runtime(args),
                             threads=args.threads or 0, fallback=not args.no_fallback)
    for prompt in prompts:  # every prompt fits the context before the long run starts
        runner.check_prompt(prompt, args.max_new_tokens)
    command = _command_line(args)
    report = run_bench(runner, prompts, settings, command=command, prompt_source=source)
    report.meta["plan_path"] = str(args.plan)
    if args.report:
        folder = Path(args.report)
        if plots:
            from specplan.bench.plots import write_plots

            report.plots = write_plots(report, profile, plan, folder)
        report.write(folder)
        print(f"specplan: wrote {folder}/report.md, report.json" + (f" and {len(report.plots)} plots" if plots else ""),
              file=sys.stderr)
    print(report.markdown())
    return 0
