"""``specplan bench``: a plan against plain decoding, the transformers peers and the grid of
configurations the planner could have chosen, in one run on the same weights, dtype,
threads, prompts and max-new-tokens.

Methods are interleaved prompt by prompt (A B C, then B C A, ...) after a warm-up, so that
machine drift and position in the cycle cancel. Metrics are defined in
:mod:`.bench_metrics`; the grid and its predictions in :mod:`.bench_grid`; plan quality in
:mod:`.bench_quality`; the report in :mod:`.bench_report`. Reference: Spec-Bench (Xia et
al., arXiv 2401.07851) for the categories and the accepted-length definition.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import torch
import transformers
from tqdm import tqdm

from specplan.core.errors import SpecplanError
from specplan.planner.latency import interpolate, nearest_curve
from specplan.core.prompts import Prompt
from specplan.runtime import build
from specplan.runtime.backends import torch_backend
from specplan.runtime.compile.warmup import compile_buckets
from specplan.planner.horizon import plan_horizon
from specplan.bench.grid import GRID_BUDGETS, GRID_GAMMAS, GridPoint, PlannerCosts, grid_points, plan_terms, planner_costs
from specplan.bench.methods import EngineMethod, Method
from specplan.bench.metrics import Measurement, Row
from specplan.runtime.backend import Session
from specplan.runtime.lossless import LosslessCheck, check_lossless, width_flip
from specplan.bench.quality import measured_terms, plan_quality
from specplan.bench.report import BenchReport
from specplan.models.chat import encode_prompt
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import SpeculativeEngine
from specplan.runtime.lossless import divergence_gap
from specplan.bench.peers import build_peers, lookup_settings
from specplan.bench.llamacpp_peer import LLAMA_CPP_PEERS, build_llamacpp_peers
from specplan.bench.llama_server_peer import drafter_gguf, is_llama_server_name, llama_server_peers

PLAN_VARIANTS = ("plan-no-fallback", "plan-fixed-chain")  # the plan rebuilt without its guard / chain growth
BASELINES = ("plain", "plain-runtime", *PLAN_VARIANTS, "hf-assisted", "hf-lookup", *LLAMA_CPP_PEERS, "grid")
DEFAULT_BASELINES = ("plain", "hf-assisted", "hf-lookup")


@dataclass(frozen=True)
class BenchSettings:
    """What to run. ``grid_*``: the grid's gammas and tree budgets, how many of the prompts it
    uses (the first ones, which the stratified order spreads over categories), and the slowest
    predicted speedup over plain decoding worth measuring."""

    max_new_tokens: int = 128
    baselines: tuple[str, ...] = DEFAULT_BASELINES
    grid_gammas: tuple[int, ...] = GRID_GAMMAS
    grid_budgets: tuple[int, ...] = GRID_BUDGETS
    grid_limit: int = 4
    grid_min_speedup: float = 0.5
    warmup_tokens: int = 8
    assistant: str | None = None  # profile id of a drafter network for hf-assisted when the plan has none
    also: tuple = ()  # (name, Plan, Profile): other plans of the same target, interleaved as ``plan:NAME``



def build_methods(runner, settings: BenchSettings, sampling: SamplingConfig, costs: dict, notes: list[str],
                  context: int = 0) -> list[Method]:
    """The plan first, then the baselines asked for (``plain`` always: it is the reference).

    ``costs``: (drafter or None, gamma) -> CostTerms (``PlannerCosts.sequence_costs``), which the
    transformers and llama.cpp peers read to pick a draft length; ``context``: the longest prompt
    plus max-new-tokens (the llama.cpp peers' context size; 0: the model's trained context)."""
    methods: list[Method] = [EngineMethod("plan", "plan", runner.engine, sampling, runner.plan.summary())]
    if "plan-no-fallback" in settings.baselines:
        methods += _unguarded(runner, sampling, notes)
    if "plan-fixed-chain" in settings.baselines:
        methods += _fixed_chain(runner, sampling, notes)
    methods += other_plans(runner, settings.also, sampling)
    if not runner.runtime_backend.runs_transformers_weights:
        return methods + llama_cpp_backend_peers(runner, settings, sampling, notes)
    if "plain-runtime" in settings.baselines:
        methods.append(EngineMethod("plain-runtime", "plain", runner.plain, sampling, "specplan's runtime, the target alone"))
    peers = [name for name in ("plain", "hf-assisted", "hf-lookup") if name in settings.baselines or name == "plain"]
    methods += build_peers(peers, runner, sampling, costs, notes, settings.assistant)
    lookup = lookup_settings(runner.plan, runner.profile, costs)
    methods += build_llamacpp_peers(settings.baselines, runner, sampling, lookup, context, notes)
    return methods


def _variant(runner, sampling: SamplingConfig, name: str, what: str, **options) -> list[Method]:
    """The plan built again with ``options`` for ``build.build_engine`` (on the plan's own target
    session where one llama.cpp context must serve every method) as the method ``name``."""
    engine = build.build_engine(runner.plan, runner.profile, runner.target, runner.device, runner.runtime,
                                runner.shared_session,  # one llama.cpp context
                                **options)
    return [EngineMethod(name, "plan", engine, sampling, f"{runner.plan.summary()}, {what}")]


def _unguarded(runner, sampling: SamplingConfig, notes: list[str]) -> list[Method]:
    """The plan's stages with no fallback guard (runtime/fallback.py): what the guard costs where
    it never switches, and saves where it does."""
    if not runner.plan.stages or runner.plan.adaptive is not None:
        notes.append("plan-no-fallback left out: the plan is plain decoding or adaptive, which runs no fallback guard")
        return []
    return _variant(runner, sampling, "plan-no-fallback", "every round", fallback=False)


def _fixed_chain(runner, sampling: SamplingConfig, notes: list[str]) -> list[Method]:
    """The plan under its guard with a lookup's chain at the plan's gamma every round (no
    ``ChainGrowth``, runtime/fallback.py): what growing the chain at run time adds."""
    growth = runner.engine.growth if isinstance(runner.engine, SpeculativeEngine) else None
    if growth is None or not growth.can_grow:
        notes.append("plan-fixed-chain left out: the plan's chain does not grow at run time (no lookup sequence "
                     "stage, no guard, a chain already at the longest, or a T(n) / n too flat to pay)")
        return []
    return _variant(runner, sampling, "plan-fixed-chain", "chain fixed", fixed_chain=True)


def other_plans(runner, also: Sequence[tuple], sampling: SamplingConfig) -> list[Method]:
    """``bench --also NAME=PLAN``: each other plan of the same target (one calibrated on another
    workload, say) as the method ``plan:NAME``, in the same interleaved run, each on its own target
    session (its own wide copy) and with its own fallback guard; its profile's backend, numerics and
    weights are the run's (``core/contract.py`` ``check_comparable``, before any model loads)."""
    methods: list[Method] = []
    for name, plan, profile in also:
        target = runner.runtime_backend.for_plan(runner.target, plan, profile)
        engine = build.build_engine(plan, profile, target, runner.device, runner.runtime)
        methods.append(EngineMethod(f"plan:{name}", "plan", engine, sampling, plan.summary()))
    return methods


def llama_cpp_backend_peers(runner, settings: BenchSettings, sampling: SamplingConfig, notes: list[str]) -> list[Method]:
    """A plan on the llama.cpp backend is measured against llama.cpp's own plain decoding of the same
    GGUF (one-token ``llama_decode`` and argmax: llama.cpp at its own speed, the reference); the
    transformers peers decode another engine's weights, so they are left out with a note. ``llama-server*``
    baselines add llama.cpp's own server (plain, draft-simple, n-gram types) on the same GGUF and threads."""
    plain = EngineMethod("plain-runtime", "plain", runner.plain, sampling,
                         "llama.cpp plain decoding: one-token llama_decode and argmax, the target alone")
    servers = llama_server_peers(settings.baselines, runner, runner.plain.target.threads,
                                 drafter_gguf(runner.profile, runner.plan.stages), notes)
    skipped = [name for name in settings.baselines
               if name not in ("plain", "plain-runtime", *PLAN_VARIANTS, "grid") and not is_llama_server_name(name)]
    if skipped:
        notes.append(f"{', '.join(skipped)} left out: the plan runs on the llama.cpp backend, whose plain decoding of "
                     "the same GGUF is the reference")
    return [plain, *servers]


def _compile_first(runner, prompt_ids: list[int], notes: list[str]) -> None:
    """With the compiled runtime, compile every width's graph of the target and of a model
    drafter before anything is timed (compile time is reported apart, never measured)."""
    if not runner.runtime_backend.compiles_graphs:
        return  # llama.cpp compiles nothing at run time
    models = [runner.target.model]
    drafter = runner.engine.drafter
    # a draft head's session is never compiled; a hierarchy's middle sessions compile too
    models += [session.model for session in (drafter.sessions() if drafter is not None else []) if session.compiled]
    seconds = sum(compile_buckets(model, runner.device, prompt_ids, runner.runtime) for model in models)
    if seconds > 0:
        notes.append(f"compiled runtime: {seconds:.0f} s compiling graphs before the timed runs (not in any measurement)")


def warm_up(methods: Sequence[Method], prompt_ids: list[int], tokens: int) -> None:
    for method in methods:
        method.run(prompt_ids, tokens)


def interleave(methods: Sequence[Method], encoded: Sequence[tuple[Prompt, list[int]]], max_new_tokens: int,
               reference: str, target: torch.nn.Module, sampling: SamplingConfig,
               predicted: dict[str, float], desc: str) -> list[Row]:
    """Run every method on every prompt, rotating the order per prompt; check each against ``reference``."""
    rows: list[Row] = []
    for index, (prompt, prompt_ids) in enumerate(tqdm(encoded, desc=desc, unit="prompt")):
        shift = index % len(methods)
        results: dict[str, Measurement] = {m.name: m.run(prompt_ids, max_new_tokens) for m in [*methods[shift:], *methods[:shift]]}
        base = results[reference]
        gaps: dict[int, float] = {}

        def gap_at(position: int) -> float:
            if position not in gaps:
                gaps[position] = divergence_gap(target, prompt_ids, base.token_ids, position)
            return gaps[position]

        for method in methods:
            result = results[method.name]
            check = None
            if sampling.greedy:
                check = LosslessCheck(True) if method.name == reference else check_lossless(base.token_ids, result.token_ids, gap_at)
                check = with_flip_width(check, target, prompt_ids, base.token_ids, result.token_ids)
            speedup = result.tokens_per_s / base.tokens_per_s if base.tokens_per_s else 0.0
            rows.append(Row(prompt.prompt_id, prompt.category, method.name, result, check, speedup, predicted.get(method.name)))
    return rows


def with_flip_width(check: LosslessCheck, target, prompt_ids: list[int], reference: Sequence[int],
                    output: Sequence[int]) -> LosslessCheck:
    """A divergence past a near-tie on a session backend (llama.cpp), with the narrowest verify width that
    decodes the output's token there (runtime/lossless.py ``width_flip``): evidence the report names beside
    the verdict, which it does not change."""
    if check.identical or check.near_tie or check.gap is None or not isinstance(target, Session):
        return check
    if check.index >= min(len(reference), len(output)):
        return check  # one output ends where the other goes on
    return replace(check, flip_width=width_flip(target, prompt_ids, reference, check.index, output[check.index]))


@contextlib.contextmanager
def shared_networks() -> Iterator[None]:
    """While building the grid's engines, load each ``model:`` drafter network once.

    ``build_engine`` loads a model drafter's network for every engine it builds; the grid builds
    one engine per point, so without this a drafter network would sit in memory once per gamma
    and budget. The networks are read-only at run time (each engine keeps its own KV caches), so
    sharing them changes no output. (``layerskip:`` drafters are views of the target already.)
    """
    original = torch_backend.load_model
    torch_backend.load_model = functools.lru_cache(maxsize=None)(original)
    try:
        yield
    finally:
        torch_backend.load_model = original


def _grid_methods(runner, points: list[GridPoint], sampling: SamplingConfig,
                  notes: list[str]) -> tuple[list[EngineMethod], list[GridPoint]]:
    """An engine per point (the runner's own for the plan and plain decoding); points whose
    engine cannot be built are dropped with a note."""
    methods, built = [], []
    with shared_networks():
        for point in points:
            if not point.stages:
                engine = runner.plain
            elif point.stages == runner.plan.stages:
                engine = runner.engine
            else:
                try:
                    engine = build.build_engine(replace(runner.plan, stages=point.stages), runner.profile,
                                                runner.target, runner.device, runner.runtime,
                                                runner.shared_session,  # one llama.cpp context
                                                fallback=False)  # a grid point is the shape as solved
                except SpecplanError as error:
                    notes.append(f"grid point {point.name} cannot run: {error}")
                    continue
            methods.append(EngineMethod(point.name, "grid", engine, sampling, point.summary, point.drafter, point.gamma))
            built.append(point)
    return methods, built


def _prune(points: list[GridPoint], min_speedup: float, notes: list[str]) -> list[GridPoint]:
    """The plan, plain decoding, the alternatives, and every point predicted at least ``min_speedup`` x plain."""
    plain = next(p for p in points if "plain" in p.roles).predicted.tokens_per_s
    kept = [p for p in points if {"plan", "plain", "alternative"} & set(p.roles)
            or p.predicted.tokens_per_s >= min_speedup * plain]
    slow = [p for p in points if p not in kept]
    if slow:
        notes.append(f"{len(slow)} grid point(s) predicted below {min_speedup}x plain decoding were not "
                     f"measured (--grid-min-speedup): " + ", ".join(f"{p.name} ({p.predicted.tokens_per_s / plain:.2f}x)" for p in slow))
    return kept


def run_grid(runner, report: BenchReport, encoded, settings: BenchSettings, sampling: SamplingConfig, latency,
             costs: PlannerCosts) -> None:
    """Measure the grid's points on the first ``grid_limit`` prompts; fill ``report.grid*``."""
    points, notes = grid_points(runner.plan, runner.profile, settings.grid_gammas, budgets=settings.grid_budgets,
                                costs=costs)
    methods, kept = _grid_methods(runner, _prune(points, settings.grid_min_speedup, notes), sampling, notes)
    report.notes.extend(notes)
    subset = list(encoded[: settings.grid_limit])
    warm_up(methods, subset[0][1], settings.warmup_tokens)
    predicted = {p.name: p.predicted.tokens_per_s for p in kept}
    report.grid_reference = "plain-runtime"
    report.grid_rows = interleave(methods, subset, settings.max_new_tokens, "plain-runtime", runner.reference_model,
                                  sampling, predicted, "bench: grid")
    for point in kept:
        measurements = [r.measurement for r in report.grid_rows if r.method == point.name]
        report.grid[point.name] = {"point": point, "measured": measured_terms(measurements, latency)}


def _meta(runner, settings: BenchSettings, prompts: Sequence[Prompt], command: str, prompt_source: str,
          load_start: tuple[float, ...]) -> dict:
    plan = runner.plan
    return {
        "plan_path": getattr(runner, "plan_path", ""), "plan_summary": plan.summary(),
        "predicted_tokens_per_s": plan.predicted.tokens_per_s, "predicted_speedup": plan.predicted.speedup,
        "predicted_accepted": plan.predicted.accepted_per_target_forward,
        "target_source": runner.profile.target.source, "dtype": runner.target.dtype, "device": str(runner.device),
        "threads": runner.runtime_backend.threads_used(runner.plain.target),
        "backend": runner.backend, "numerics": runner.profile.device.numerics, "max_new_tokens": settings.max_new_tokens, "prompts": len(prompts),
        "prompt_source": prompt_source, "temperature": plan.temperature, "baselines": list(settings.baselines),
        "grid_gammas": list(settings.grid_gammas), "grid_budgets": list(settings.grid_budgets),
        "grid_limit": settings.grid_limit, "grid_min_speedup": settings.grid_min_speedup,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch": torch.__version__, "transformers": transformers.__version__, "command": command,
        "load_average_start": [round(v, 2) for v in load_start],
    }


def _quality(report: BenchReport, plan, costs: PlannerCosts, latency) -> dict:
    """Plan quality from the main phase (prediction) and the grid (choice), for any plan shape."""
    plan_name = next((name for name, entry in report.grid.items() if "plan" in entry["point"].roles), None)
    grid = {name: {"predicted": entry["point"].predicted, "measured": entry["measured"]}
            for name, entry in report.grid.items()}
    plan_rows = [r.measurement for r in report.rows if r.method == "plan"]
    return plan_quality(plan.summary(), plan_terms(plan, costs), measured_terms(plan_rows, latency),
                        grid, plan_name, _plain(report, costs, latency))


def _plain(report: BenchReport, costs: PlannerCosts, latency) -> tuple | None:
    """The runtime's plain decoding, predicted and measured (main phase, else the grid), if it ran."""
    predicted = costs.terms(())
    for rows in (report.rows, report.grid_rows):
        measurements = [r.measurement for r in rows if r.method == "plain-runtime"]
        if measurements and predicted is not None:
            return predicted, measured_terms(measurements, latency)
    return None


def run_bench(runner, prompts: Sequence[Prompt], settings: BenchSettings, *, methods: Sequence[Method] | None = None,
              command: str = "", prompt_source: str = "") -> BenchReport:
    """Measure ``runner``'s plan against the baselines on ``prompts``; return the report (no plots)."""
    load_start = os.getloadavg()
    plan, profile = runner.plan, runner.profile
    sampling = SamplingConfig(temperature=plan.temperature)
    notes: list[str] = []
    costs = planner_costs(profile, plan.temperature, settings.grid_gammas, settings.grid_budgets, plan_horizon(plan))
    encoded = [(prompt, encode_prompt(runner.target.tokenizer, prompt.text)) for prompt in prompts]
    if methods is None:
        context = max(len(ids) for _, ids in encoded) + settings.max_new_tokens
        methods = build_methods(runner, settings, sampling, costs.sequence_costs(), notes, context)
    names = [m.name for m in methods]
    reference = "plain" if "plain" in names else "plain-runtime"
    curve = nearest_curve(profile.target, None)
    latency = (lambda n: interpolate(curve, n).ms) if curve is not None else (lambda n: float("nan"))
    predicted = {"plan": plan.predicted.tokens_per_s,
                 **{f"plan:{name}": other.predicted.tokens_per_s for name, other, _ in settings.also}}
    if curve is not None:
        predicted["plain-runtime"] = 1000.0 / latency(1)
    _compile_first(runner, encoded[0][1], notes)
    warm_up(methods, encoded[0][1], settings.warmup_tokens)
    rows = interleave(methods, encoded, settings.max_new_tokens, reference, runner.reference_model, sampling,
                      predicted, "bench: " + " ".join(names))
    for method in methods:  # a llama-server peer's process stops here, before the grid runs
        getattr(method, "close", lambda: None)()
    report = BenchReport(_meta(runner, settings, prompts, command, prompt_source, load_start),
                         [{"name": m.name, "kind": m.kind, "description": m.description,
                           "settings": getattr(m, "settings", {})} for m in methods], reference, rows, notes=notes)
    if not sampling.greedy:
        notes.append("temperature > 0: outputs are samples, so the token-identity check does not apply "
                     "(the runtime's rejection sampling is checked statistically by the tests)")
    if "grid" in settings.baselines:
        run_grid(runner, report, encoded, settings, sampling, latency, costs)
    report.meta["load_average_end"] = [round(v, 2) for v in os.getloadavg()]
    if runner.runtime_backend.rounding_note:
        notes.append(runner.runtime_backend.rounding_note)
    elif runner.target.dtype != "float32":
        notes.append(f"{runner.target.dtype}: a forward over n tokens is not bit-identical to n one-token forwards, and "
                     "the runtime prefills all but the last prompt token before decoding, so its outputs (plain-runtime "
                     "included) may part from transformers' at numerical near-ties; float32 runs are token-identical")
    report.quality = _quality(report, plan, costs, latency)
    return report
