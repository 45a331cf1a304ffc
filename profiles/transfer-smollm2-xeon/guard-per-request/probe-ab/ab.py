"""A/B of guard settings in one interleaved run: the same plan under several guards, plain decoding beside."""
import sys, json, time
from dataclasses import replace
from specplan.api import Runner
from specplan.core.workloads import workload_split
from specplan.models.chat import encode_messages
from specplan.runtime import build
from specplan.runtime.fallback import FallbackGuard, GuardSettings
from specplan.runtime.drafters.base import SamplingConfig

plan_path, workload, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
runner = Runner.open(plan_path, threads=2).plan_runner
tok = runner.target.tokenizer
shared = runner.plain.target
engines = {"plain": runner.plain}
variants = {"reprobe2": GuardSettings(reprobe_rounds=2), "reprobe4": GuardSettings(reprobe_rounds=4),
            "margin10": GuardSettings(reprobe_rounds=2, margin=0.1),
            "unguarded": GuardSettings(enabled=False)}
for name, settings in variants.items():
    engine = build.build_engine(runner.plan, runner.profile, runner.target, runner.device, runner.runtime, shared,
                                fallback=settings.enabled)
    if engine.guard is not None:
        engine.guard = FallbackGuard(settings, verify_ms=engine.guard.verify_ms)
    engines[name] = engine
from specplan.core.prompts import stratified
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
        res[name] = (len(r.token_ids), r.seconds, r.draft_seconds + r.verify_seconds)
    rows.append({"prompt": p.prompt_id, **res})
    print(i, p.prompt_id, {k: round(v[1], 3) for k, v in res.items()}, flush=True)
json.dump(rows, open(out, "w"))
tot = {k: sum(r[k][1] for r in rows) for k in names}
toks = {k: sum(r[k][0] for r in rows) for k in names}
for k in names:
    print(k, "tok/s", round(toks[k] / tot[k], 2), "vs plain", round((toks[k] / tot[k]) / (toks["plain"] / tot["plain"]), 3))
import statistics, random
for k in names:
    per = [(r[k][0] / r[k][1]) / (r["plain"][0] / r["plain"][1]) for r in rows]
    boot = []
    rng = random.Random(0)
    for _ in range(2000):
        sample = [rng.choice(rows) for _ in rows]
        boot.append((sum(r[k][0] for r in sample) / sum(r[k][1] for r in sample)) / (sum(r["plain"][0] for r in sample) / sum(r["plain"][1] for r in sample)))
    boot.sort()
    print(k, "median per prompt", round(statistics.median(per), 3), "pooled 95%", round(boot[50], 3), round(boot[1950], 3))
