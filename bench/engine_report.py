"""The report of ``specplan bench PLAN --engine E`` (llama.cpp or transformers), one format for both:
the export's prediction beside what the engine measured (docs/formats.md, "bench --engine --json").

The prediction is the export's re-solve for the engine (``L_engine`` in ms per token and its
speedup over plain decoding, planner-math.md section 10) from the profile's latencies; plain
decoding's predicted ms per token is ``L_engine x speedup`` (the target's T(1), section 1).
Measured figures are decode figures (each prompt's prefill and first token left out,
:mod:`specplan.bench.engine_rows`), pooled over the prompts. *predicted/measured* divides the
predicted tokens/s by the measured (above 1: the prediction was optimistic).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specplan.bench.engine_rows import EngineRow, agreement
from specplan.core.plan import Prediction


@dataclass(frozen=True)
class EngineBench:
    """One engine bench: the exported command, the prediction, and the rows measured."""

    engine: str  # llama.cpp | transformers
    config: str  # the exported command (transformers: the Python snippet)
    predicted: Prediction  # the export's, for the engine's restricted plan
    rows: tuple[EngineRow, ...]  # plain decoding first, then the exported setting (if any)
    prompts: int
    max_new_tokens: int
    latency_source: str  # the profile's device.source: measured (specplan's runtime) | llama.cpp | roofline
    settings: dict = field(default_factory=dict)  # threads, dtype, ...: what the run used
    agreement_note: str = ""  # how to read the share of outputs equal to plain decoding's
    lossless: str = ""  # transformers: the per-prompt verdict against plain greedy

    @property
    def plain(self) -> EngineRow:
        return self.rows[0]

    @property
    def exported(self) -> EngineRow:
        return self.rows[-1]

    @property
    def predicted_plain_ms(self) -> float:
        return self.predicted.ms_per_token * self.predicted.speedup

    @property
    def measured_speedup(self) -> float:
        exported = self.exported.decode_ms_per_token
        return self.plain.decode_ms_per_token / exported if exported > 0 else 0.0  # 0: nothing was decoded


def _ratio(predicted: float, measured: float) -> float | None:
    return predicted / measured if measured > 0 else None


def engine_record(bench: EngineBench) -> dict:
    """The ``--json`` object."""
    predicted_rate = 1e3 / bench.predicted.ms_per_token
    return {
        "engine": bench.engine, "config": bench.config, "prompts": bench.prompts, "max_new_tokens": bench.max_new_tokens,
        **bench.settings, "predicted_ms_per_token": bench.predicted.ms_per_token,
        "predicted_speedup": bench.predicted.speedup, "predicted_tokens_per_s": predicted_rate,
        "measured_ms_per_token": bench.exported.decode_ms_per_token,
        "measured_plain_ms_per_token": bench.plain.decode_ms_per_token,
        "measured_tokens_per_s": bench.exported.decode_tokens_per_s,
        "measured_plain_tokens_per_s": bench.plain.decode_tokens_per_s,
        "measured_speedup": bench.measured_speedup,
        "predicted_over_measured": _ratio(predicted_rate, bench.exported.decode_tokens_per_s),
        "speedup_predicted_over_measured": _ratio(bench.predicted.speedup, bench.measured_speedup),
        "same_output_share": agreement(list(bench.rows)), "latency_source": bench.latency_source,
        **({"lossless": bench.lossless} if bench.lossless else {}),
        "methods": [{"name": row.name, "description": row.description, "decode_ms_per_token": row.decode_ms_per_token,
                     "decode_tokens_per_s": row.decode_tokens_per_s, "tokens_per_s": row.tokens_per_s,
                     "new_tokens": row.new_tokens, "settings": dict(row.settings)} for row in bench.rows],
    }


def _row(label: str, predicted_ms: float, measured_ms: float, predicted_speedup: float, measured_speedup: float) -> str:
    rate, measured = 1e3 / predicted_ms, 1e3 / measured_ms if measured_ms > 0 else 0.0
    ratio = _ratio(rate, measured)
    return (f"| {label} | {predicted_ms:.2f} | {measured_ms:.2f} | {rate:.1f} | {measured:.1f} | "
            f"{'-' if ratio is None else f'{ratio:.2f}'} | {predicted_speedup:.2f}x | {measured_speedup:.2f}x |")


def engine_table(bench: EngineBench) -> list[str]:
    """The printed report: what ran, predicted beside measured, and the outputs against plain."""
    what = f"`{bench.config}`" if "\n" not in bench.config else "the exported settings (`specplan export --engine transformers`)"
    used = ", ".join(f"{key} {value}" for key, value in bench.settings.items())
    lines = [f"{bench.engine} bench of {what} on {bench.prompts} prompts x {bench.max_new_tokens} new tokens "
             f"(decode after the first token; {used}; latency in the prediction: {bench.latency_source})",
             "| method | predicted ms/token | measured ms/token | predicted tok/s | measured tok/s | predicted/measured "
             "| predicted speedup | measured speedup |",
             "|---|---|---|---|---|---|---|---|",
             _row(f"{bench.engine} plain", bench.predicted_plain_ms, bench.plain.decode_ms_per_token, 1.0, 1.0)]
    if len(bench.rows) > 1:
        lines.append(_row(bench.exported.description, bench.predicted.ms_per_token, bench.exported.decode_ms_per_token,
                          bench.predicted.speedup, bench.measured_speedup))
    else:
        lines.append("the export chose plain decoding (no speculative option): nothing else to run")
    lines.append(f"outputs equal to plain {bench.engine} on {agreement(list(bench.rows)):.0%} of prompts "
                 f"({bench.agreement_note})")
    if bench.lossless:
        lines.append(f"lossless against plain greedy generate: {bench.lossless}")
    return lines
