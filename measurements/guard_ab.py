"""The fallback guard's variants in one interleaved run (runtime/fallback.py, docs/planner-math.md
section 12.5): the same plan under the guard's variants (VARIANT below) and plain decoding, each
prompt decoded by all of them in a rotating
order; per method the pooled decode-and-prefill rate against plain decoding with its 95% interval
over prompts (resampled), target forwards and outputs identical to plain decoding.

    [THREADS=2] .venv/bin/python measurements/guard_ab.py PLAN WORKLOAD PROMPTS OUT.json [VARIANT,...]

VARIANT: guard (the default guard), backoff-only (no shorter chains), empty-not-counted (rounds
without a draft do not count towards the first judgement), full-first-chain (the default guard, a fresh
match drafting the plan's gamma instead of ChainGrowth's first chain), cheapest-first-chain (the default
guard, a fresh match drafting the chain that verifies a token most cheaply, the first chain before it was
taken at the knee), no-match-gate (the default guard, a lookup drafting every match: runtime/match_gate.py
off), flat-gate (the default guard, its match gate pricing a copy on the plan's chain, not the grown ones),
unguarded; default guard,backoff-only,unguarded.

Per prompt and method OUT.json holds (tokens, seconds, forwards, plain rounds, shortenings).
Run it on a quiet machine (nothing else timed or tested beside it)."""
import json, os, random, sys
from specplan.api import Runner
from specplan.core.prompts import stratified
from specplan.core.workloads import workload_split
from specplan.models.chat import encode_messages
from specplan.runtime import build
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.fallback import ChainGrowth, FallbackGuard, GuardSettings, first_chain
from specplan.runtime.match_gate import MatchGate
from specplan.planner.latency import latency_table, linear_widths
from specplan.core.limits import LONGEST_LOOKUP_CHAIN


def interpolated(profile):
    """The target's T(1..64) read linearly between profiled widths (the variant interpolated-widths)."""
    return latency_table(linear_widths(profile.target), None, LONGEST_LOOKUP_CHAIN + 1)


plan_path, workload, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
threads = int(os.environ.get("THREADS", "2"))  # llama.cpp's CPU threads
runner = Runner.open(plan_path, threads=threads).plan_runner
tok = runner.target.tokenizer
shared = runner.plain.target
engines = {"plain": runner.plain}
VARIANTS = {"guard": GuardSettings(), "backoff-only": GuardSettings(shorter_chains=False),
            "empty-not-counted": GuardSettings(count_empty_rounds=False), "unguarded": GuardSettings(enabled=False),
            "full-first-chain": GuardSettings(), "no-match-gate": GuardSettings(),
            "interpolated-widths": GuardSettings(), "cheapest-first-chain": GuardSettings(), "flat-gate": GuardSettings()}
chosen = sys.argv[5].split(",") if len(sys.argv) > 5 else ["guard", "backoff-only", "unguarded"]
for name in chosen:
    settings = VARIANTS[name]
    engine = build.build_engine(runner.plan, runner.profile, runner.target, runner.device, runner.runtime, shared,
                                fallback=settings.enabled)
    if engine.guard is not None:
        engine.guard = FallbackGuard(settings, verify_ms=engine.guard.verify_ms)
    if name == "full-first-chain" and engine.growth is not None:
        growth = engine.growth
        engine.growth = ChainGrowth(growth.base, verify_ms=engine.guard.verify_ms, first=growth.base)
    if name == "interpolated-widths":
        table = interpolated(runner.profile)
        engine.guard = FallbackGuard(settings, verify_ms=table)
        engine.growth = ChainGrowth(engine.growth.base, verify_ms=table)
        engine.stage.drafter.gate = MatchGate(engine.growth.base, table)
    if name == "cheapest-first-chain" and engine.growth is not None:
        verify_ms = engine.guard.verify_ms
        engine.growth = ChainGrowth(engine.growth.base, verify_ms=verify_ms,
                                    first=first_chain(engine.growth.base, verify_ms, knee=1.0))  # the cheapest
    if name == "flat-gate":
        engine.stage.drafter.gate = MatchGate(engine.growth.base, engine.guard.verify_ms)
    if name == "no-match-gate":
        engine.stage.drafter.gate = None
    engines[name] = engine
prompts = stratified(workload_split(workload, "evaluation"), n)
sampling = SamplingConfig()
names = list(engines)
rows = []
warm = encode_messages(tok, [{"role": "user", "content": prompts[0].text}])
for e in engines.values():
    e.generate(warm, 8, sampling)
for i, p in enumerate(prompts):
    ids = encode_messages(tok, [{"role": "user", "content": p.text}])
    order = names[i % len(names):] + names[:i % len(names)]
    res = {}
    for name in order:
        r = engines[name].generate(ids, 128, sampling)
        guard = engines[name].guard
        res[name] = (len(r.token_ids), r.seconds, len(r.committed_per_forward), r.plain_rounds,
                     guard.shortenings if guard else 0, list(r.token_ids))
    rows.append({"prompt": p.prompt_id, "category": p.category, **{k: v[:5] for k, v in res.items()},
                 "identical": {k: res[k][5] == res["plain"][5] for k in names}})
    print(i, p.prompt_id, {k: (round(v[1], 2), v[2], v[3], v[4]) for k, v in res.items()}, flush=True)
json.dump(rows, open(out, "w"))
for k in names:
    tokens = sum(r[k][0] for r in rows); seconds = sum(r[k][1] for r in rows)
    boot, rng = [], random.Random(0)
    for _ in range(2000):
        sample = [rng.choice(rows) for _ in rows]
        boot.append((sum(r[k][0] for r in sample) / sum(r[k][1] for r in sample)) /
                    (sum(r["plain"][0] for r in sample) / sum(r["plain"][1] for r in sample)))
    boot.sort()
    plain_rate = sum(r["plain"][0] for r in rows) / sum(r["plain"][1] for r in rows)
    print(f"{k:14s} {tokens / seconds:6.2f} tok/s  {tokens / seconds / plain_rate:.3f}x plain  95% [{boot[50]:.3f}, {boot[1950]:.3f}]"
          f"  forwards {sum(r[k][2] for r in rows)}  identical {sum(r['identical'][k] for r in rows)}/{len(rows)}")
