"""What each CLI command does; argument parsing lives in :mod:`specplan.cli`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from specplan.drafter_spec import parse_drafter_spec
from specplan.errors import PlanError, SpecplanError
from specplan.plan import Plan, load_plan, save_plan
from specplan.profile import Profile, load_profile, save_profile
from specplan.prompts import PROFILE_PROMPTS, Prompt, profile_prompts, read_prompts, stratified
from specplan.yamlio import file_sha256

DEFAULT_DRAFTERS = ("ngram:3", "ngram:5", "recycle", "cache", "layerskip:20", "layerskip:26")
DEMO_PROMPT = "Explain in a few sentences why the sky is blue, then repeat the key reason in one line."
# Shapes the runtime executes in this version; the planner searches only these.
RUNTIME_SHAPES = ("sequence", "tree")
RUNTIME_MAX_STAGES = 3  # drafter -> middle -> ... -> target (runtime/drafters/hierarchy.py)


def _resolve_dtype(dtype: str) -> str:
    return "bfloat16" if dtype == "auto" else dtype


def command_profile(args) -> int:
    specs = [parse_drafter_spec(spec) for spec in (args.drafter or DEFAULT_DRAFTERS)]
    from specplan.quant.methods import normalize_quants

    quants = normalize_quants(args.quant)  # first = the target's precision, the rest: variants (README, "4-bit targets")
    if args.limit is not None and args.limit < 1:
        raise SpecplanError("--limit must be at least 1")
    limit = args.limit or (13 if args.quick else PROFILE_PROMPTS)
    prompts = stratified(read_prompts(args.prompts), limit) if args.prompts else profile_prompts(limit)
    import torch  # noqa: F401 - heavy imports only once the arguments are known to be good

    from specplan.runtime.models import load_model, quiet_transformers
    from specplan.runtime.profiler.run import ProfileSettings, run_profile
    from specplan.runtime.timing import pick_device

    quiet_transformers()
    device = pick_device(args.device)
    settings = ProfileSettings.quick() if args.quick else ProfileSettings()
    if args.prompts:
        settings = ProfileSettings(**{**settings.__dict__, "prompts_label": str(args.prompts)})
    if quants == ["none"]:
        target = load_model(args.target, _resolve_dtype(args.dtype), str(device))
        profile = run_profile(target, specs, prompts, device, settings)
    else:
        from specplan.quant.variants import profile_variants

        profile = profile_variants(args.target, quants, specs, prompts, device, settings, _resolve_dtype(args.dtype))
    save_profile(profile, args.output)
    print(f"specplan: wrote {args.output}")
    if not args.no_plan:
        plan_path = Path(args.output).with_name("plan.yaml")
        _solve_and_write(profile, Path(args.output), plan_path, max_budget=64, max_depth=8, temperature=0.0, explain=False)
    return 0


def _solve_and_write(profile: Profile, profile_path: Path, plan_path: Path, *, max_budget: int, max_depth: int,
                     temperature: float, explain: bool, stages: int | None = None) -> Plan:
    from specplan.planner import PlanOptions, explain as explain_result, solve_plan

    if max_budget < 1 or max_depth < 1:
        raise PlanError("--max-budget and --max-depth must be at least 1")
    if stages is not None and not 0 <= stages <= RUNTIME_MAX_STAGES:
        raise PlanError(f"--stages must be between 0 (plain decoding) and {RUNTIME_MAX_STAGES}")
    options = PlanOptions(max_budget=max_budget, max_depth=max_depth, gammas=tuple(range(1, max_depth + 1)),
                          shapes=RUNTIME_SHAPES, max_stages=RUNTIME_MAX_STAGES, temperature=temperature)
    relative = os.path.relpath(profile_path.resolve(), plan_path.resolve().parent)
    result = solve_plan(profile, options, profile_path=relative, profile_sha256=file_sha256(profile_path))
    plan = result.plan if stages is None else _plan_with_stages(result, stages)
    save_plan(plan, plan_path)
    predicted = plan.predicted
    print(f"specplan: wrote {plan_path}: {plan.summary()}; predicted {predicted.tokens_per_s:.1f} tok/s, "
          f"{predicted.speedup:.2f}x over plain decoding")
    if stages is not None and plan.stages != result.plan.stages:
        print(f"specplan: (the overall best is {result.plan.summary()}, predicted "
              f"{result.plan.predicted.tokens_per_s:.1f} tok/s)")
    if explain:
        print(explain_result(result))
    return plan


def _plan_with_stages(result, stages: int) -> Plan:
    """The best candidate of ``result`` with exactly ``stages`` stages, as a plan."""
    from specplan.planner.solve import plan_for_candidate

    for candidate in result.candidates:
        if len(candidate.stages) == stages:
            return plan_for_candidate(result, candidate)
    raise PlanError(f"the profile allows no {stages}-stage configuration (a hierarchy needs acceptance entries "
                    "measured against a middle model: re-run `specplan profile` with a model drafter)")


def command_plan(args) -> int:
    if getattr(args, "sku", None) or getattr(args, "efficiency", None) is not None or getattr(args, "fit_efficiency", False):
        from specplan.deploy import command_plan_sku

        return command_plan_sku(args)
    profile = load_profile(args.profile)
    output = Path(args.output) if args.output else Path(args.profile).with_name("plan.yaml")
    _solve_and_write(profile, Path(args.profile), output, max_budget=args.max_budget, max_depth=args.max_depth,
                     temperature=args.temperature, explain=args.explain, stages=args.stages)
    return 0


def load_plan_and_profile(plan_path: str) -> tuple[Plan, Profile, Path]:
    """The plan, the profile it was solved from, and that profile's path."""
    plan = load_plan(plan_path)
    profile_path = Path(plan.profile_path)
    if not profile_path.is_absolute():
        profile_path = Path(plan_path).resolve().parent / profile_path
    if not profile_path.is_file():
        raise PlanError(f"plan refers to profile {profile_path}, which does not exist; re-run `specplan profile`")
    profile = load_profile(profile_path)
    known = {model.id for model in profile.models} | {entry.id for entry in profile.retrieval}
    for stage in plan.stages:
        for name in (stage.drafter, stage.verifier):
            if name not in known:
                raise PlanError(f"plan names {name!r} but its profile {profile_path} has no such model or drafter; "
                                f"re-run `specplan plan {profile_path}`")
    if plan.target != profile.target.id:
        raise PlanError(f"plan's target {plan.target!r} is not the profile's target {profile.target.id!r}; re-run `specplan plan`")
    return plan, profile, profile_path


def _run_prompts(args) -> list[Prompt]:
    if args.prompts:
        return read_prompts(args.prompts)
    text = DEMO_PROMPT if args.prompt is None else args.prompt
    if not text.strip():
        raise SpecplanError("the prompt is empty; pass --prompt TEXT with some text or --prompts FILE")
    return [Prompt("prompt", "prompt", text)]


def command_run(args) -> int:
    if args.max_new_tokens < 1:
        raise SpecplanError("--max-new-tokens must be at least 1")
    if args.temperature is not None and args.temperature < 0:
        raise SpecplanError("--temperature must be >= 0")
    if not 0.0 < args.top_p <= 1.0:
        raise SpecplanError("--top-p must be in (0, 1]")
    plan, profile, profile_path = load_plan_and_profile(args.plan)
    prompts = _run_prompts(args)
    from specplan.runtime.runner import PlanRunner

    runner = PlanRunner.open(plan, profile, profile_path, force=args.force)
    temperature = plan.temperature if args.temperature is None else args.temperature
    for prompt in prompts:
        record = runner.run_prompt(prompt, args.max_new_tokens, temperature, args.top_p, args.seed,
                                   stream=args.stream and not args.json, compare_plain=args.compare_plain)
        record["plan"] = str(args.plan)
        if args.json:
            print(json.dumps(record, ensure_ascii=False), flush=True)
        else:
            if not args.stream:
                print(record["text"])
            print(runner.summary_line(record), flush=True)
    return 0


def command_roofline(args) -> int:
    from specplan.deploy import command_roofline as run

    return run(args)


def command_export(args) -> int:
    from specplan.deploy import command_export as run

    return run(args)


def command_bench(args) -> int:
    from specplan.runtime.bench_command import command_bench as run

    return run(args)


def command_quantize(args) -> int:
    from specplan.quant.command import command_quantize as run

    return run(args)


def command_distill(args) -> int:
    from specplan.runtime.distill.command import command_distill as run

    return run(args)
