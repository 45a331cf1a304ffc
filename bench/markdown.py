"""``report.md``: the bench report's tables (the numbers themselves live in report.json)."""

from __future__ import annotations

OVERHEAD_GOAL = 0.10
SPEEDUP_GOAL = 2.0
PEER_GOAL = 1.3


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _f(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _yes(value) -> str:
    return "-" if value is None else "yes" if value else "NO"


def _load(values) -> str:
    return "-" if not values else "/".join(f"{v:.1f}" for v in values)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _interval(values) -> str:
    return "" if not values else f" [{values[0]:.2f}-{values[1]:.2f}]"


def _headline(report) -> list[str]:
    lines = ["## Headline: the plan against plain decoding and the best transformers peer", "",
             "| category | prompts | plan tok/s | plain tok/s | speedup over plain [95% interval over prompts] | best peer | peer tok/s | plan / best peer | accepted/forward | lossless |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    table = report.headline()
    counts = {c: sum(1 for r in report.rows if r.category == c and r.method == report.reference) for c in report.categories()}
    counts["all"] = sum(counts.values())
    for category, row in table.items():
        name = f"**{category}**" if category == "all" else category
        lines.append(f"| {name} | {counts[category]} | {_f(row['plan_tokens_per_s'])} | {_f(row['plain_tokens_per_s'])} | "
                     f"{_x(row['speedup_over_plain'])}{_interval(row.get('speedup_interval'))} | {row['best_peer'] or '-'} | "
                     f"{_f(row['best_peer_tokens_per_s'])} | "
                     f"{_x(row['ratio_to_best_peer'])} | {_f(row['mean_accepted'], 2)} | {_yes(row['lossless'])} |")
    overall = table["all"]
    lines += ["", f"Overall: the plan runs at **{_x(overall['speedup_over_plain'])}** plain decoding (goal >= {SPEEDUP_GOAL}x) "
              f"and **{_x(overall['ratio_to_best_peer'])}** the best peer ({overall['best_peer'] or 'none measured'}; "
              f"goal >= {PEER_GOAL}x), measured in the same run, prompt by prompt."]
    return lines


def _methods(report) -> list[str]:
    lines = ["## Methods, all prompts", "",
             f"Speedups are over `{report.reference}` on the same prompt; spread = quartiles and range of the per-prompt speedups.", "",
             "| method | what | tok/s (total) | median tok/s | speedup | median speedup [quartiles] (range) | accepted/forward | overhead | lossless |",
             "|---|---|---|---|---|---|---|---|---|"]
    table = report.aggregates()
    for method in report.methods:
        a = table[method["name"]]
        if not a.get("prompts"):
            continue
        q, r = a["speedup_quartiles"], a["speedup_range"]
        lines.append(f"| {method['name']} | {method['description']} | {_f(a['tokens_per_s'])} | {_f(a['median_tokens_per_s'])} | "
                     f"{_x(a['speedup'])} | {a['median_speedup']:.2f}x [{q[0]:.2f}, {q[1]:.2f}] ({r[0]:.2f}-{r[1]:.2f}) | "
                     f"{_f(a['mean_accepted'], 2)} | {_pct(a['overhead_share'])} | {a['lossless_detail']} |")
    return lines


def _by_category(report) -> list[str]:
    names = [m["name"] for m in report.methods]
    lines = ["## Speedup over plain by category (tok/s in brackets)", "",
             "| category | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for category in report.categories():
        table = report.aggregates(category)
        cells = [f"{_x(table[n]['speedup'])} ({_f(table[n]['tokens_per_s'])})" if table[n].get("prompts") else "-" for n in names]
        lines.append(f"| {category} | " + " | ".join(cells) + " |")
    return lines


def _spread(quality: dict) -> str:
    """The measured decode rate's interval over prompts, when the report has one."""
    interval = quality.get("measured_decode_interval")
    return f" (95% interval over the prompts {interval[0]:.1f}-{interval[1]:.1f})" if interval else ""


def _quality(report) -> list[str]:
    quality = report.quality
    lines = ["## Plan quality", ""]
    lines += [f"- {line}" for line in quality.get("verdict", [])]
    if "predicted_over_measured" in quality:
        lines += ["", f"Chosen plan: predicted {quality['predicted_tokens_per_s']:.1f} tok/s; measured "
                  f"{quality['measured_decode_tokens_per_s']:.1f} tok/s after the prefill{_spread(quality)}, "
                  f"{quality['measured_tokens_per_s']:.1f} "
                  f"end to end (predicted/measured {quality['predicted_over_measured']:.2f} and "
                  f"{quality['predicted_over_measured_end_to_end']:.2f}).", "",
                  "Cost terms per target forward (round), L = (D + V) / E (D: drafting below the target, a hierarchy's "
                  "middle rounds included; V: the target's forward over the draft; E: tokens committed per target "
                  "forward); effect = change of ms/token when the term alone takes its measured value:", "",
                  "| term | predicted | measured | measured/predicted | effect on ms/token |", "|---|---|---|---|---|"]
        if not quality["terms"]:
            lines.append("| (the plan is not among the planner's candidates: no per-term prediction) | - | - | - | - |")
        for term in quality["terms"]:
            lines.append(f"| {term['term']} | {term['predicted']:.3g} | {term['measured']:.3g} | "
                         f"{_f(term['ratio'], 2)} | {100 * term['effect']:+.0f}% |")
    return lines


GRID_NAMES = ("Point names: `D/gG` drafter D alone, a sequence of G tokens; `D/treeN` a static tree of N nodes "
              "(`D/dtreeN` grown best-first at run time, `+GB` with B nodes grafted from retrieval drafter G); "
              "`A>B` a hierarchy, bottom stage first (A's stage is verified by B's drafter, which the target verifies); "
              "`plain-runtime` the target alone.")


def _grid(report) -> list[str]:
    if not report.grid:
        return []
    prompts = sorted({r.prompt_id for r in report.grid_rows}, key=str)
    lines = ["## Grid: the configurations the planner could have chosen, measured end to end", "",
             f"{len(prompts)} prompts ({', '.join(prompts)}), interleaved; speedup over `{report.grid_reference}`; "
             "decode tok/s excludes the prefill (what the prediction covers).", "", GRID_NAMES, "",
             "| point | kind | roles | predicted tok/s | measured tok/s | decode tok/s | predicted/measured | speedup | accepted/forward (predicted) | overhead | lossless |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in sorted(report.grid_table(), key=lambda r: -(r["measured_tokens_per_s"] or 0)):
        lines.append(f"| {row['name']} | {row['kind']} | {', '.join(row['roles'])} | {row['predicted_tokens_per_s']:.1f} | "
                     f"{_f(row['measured_tokens_per_s'])} | {_f(row['measured_decode_tokens_per_s'])} | "
                     f"{_f(row['predicted_over_measured'], 2)} | {_x(row['speedup'])} | {_f(row['mean_accepted'], 2)} "
                     f"({_f(row['predicted']['accepted'], 2)}) | {_pct(row['overhead_share'])} | "
                     f"{_yes(row['lossless'])} |")
    return lines


def _lossless(report) -> list[str]:
    lines = ["## Lossless check", "",
             f"Every output against `{report.reference}` ({report.meta['dtype']}); a divergence at a top-2 logit gap "
             "below 0.5 is a numerical near-tie of low-precision arithmetic, any divergence in float32 is a failure.", ""]
    for name, entry in report.lossless().items():
        status = "not checked" if entry["ok"] is None else "pass" if entry["ok"] else "**FAIL**"
        if entry["ok"] is not None and not entry.get("required", True):
            status = "reported, not required (another engine's own kernels)"
        lines.append(f"- {name}: {status}, {entry['detail']}")
        for d in entry["divergences"][:8]:
            lines.append(f"  - prompt {d['prompt_id']}: first differs at token {d['index']}, top-2 gap {_f(d['gap'], 3)}"
                         + _flip(d.get("flip_width")))
    return lines


def _flip(width: int | None) -> str:
    """What the verify widths say of a divergence past a near-tie (runtime/lossless.py ``width_flip``)."""
    if width is None:
        return ""
    if width == 0:
        return "; no verify width up to 64 decodes the output's token there"
    return f"; a verify of {width} token(s) ending there decodes the output's token (the backend's arithmetic at that width)"


def _overhead(report) -> list[str]:
    plan = report.aggregates()[report.plan_method()]
    share = plan.get("overhead_share")
    verdict = "met" if share is not None and share <= OVERHEAD_GOAL else "missed"
    return ["## Runtime overhead", "",
            f"The plan spends {_pct(share)} of its wall time outside model forwards (goal <= {OVERHEAD_GOAL:.0%}: {verdict}); "
            "per method in the methods table (for transformers' methods: outside the target's and the assistant's forwards)."]


def _numerics(meta: dict) -> str:
    """", llama.cpp exact numerics" (or fast) for a plan on the llama.cpp backend; empty on torch."""
    numerics = meta.get("numerics") or ""
    return f", llama.cpp {numerics} numerics" if numerics else ""


def render(report) -> str:
    meta = report.meta
    lines = [f"# specplan bench: {meta['plan_summary']}", "",
             f"Target `{meta['target_source']}` in {meta['dtype']} on {meta['device']} ({meta['threads']} threads"
             f"{_numerics(meta)}); "
             f"{meta['prompts']} prompts over {len(report.categories())} categories ({meta['prompt_source']}); "
             f"max {meta['max_new_tokens']} new tokens; temperature {meta['temperature']}; {meta['date']}; "
             f"torch {meta['torch']}, transformers {meta['transformers']}; load average (1, 5, 15 min) "
             f"{_load(meta.get('load_average_start'))} at the start, {_load(meta.get('load_average_end'))} at the end.", "",
             f"Command: `{meta['command']}`", "",
             f"Predicted by the plan: {meta['predicted_tokens_per_s']:.1f} tok/s, {meta['predicted_speedup']:.2f}x over plain "
             f"decoding ({meta['predicted_accepted']:.2f} accepted per target forward).", ""]
    for section in (_headline, _methods, _by_category, _quality, _grid, _lossless, _overhead):
        part = section(report)
        if part:
            lines += part + [""]
    if report.notes:
        lines += ["## Notes", ""] + [f"- {note}" for note in report.notes] + [""]
    if report.plots:
        lines += ["## Plots", ""] + [f"![{name.rsplit('.', 1)[0]}]({name})" for name in report.plots]
    return "\n".join(lines).rstrip()
