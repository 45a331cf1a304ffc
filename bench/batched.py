"""Whole-batch tokens/s at every batch size: engines of the schedule's row for the batch, each round
playing the row for the sequences in flight (``schedule``, as ``run --batch`` does), the plan's engines
playing the plan every round (``plan``), engines of plain decoding (``plain-runtime``), each sequence on
an engine of its own with their forwards batched (runtime/batcher.py), and transformers ``generate`` with
left padding (``plain``), each beside the schedule's prediction (planner-math.md section 11.2;
docs/guide.md, "Batched runs").

At batch ``b`` every method decodes the same ``b`` prompts together; the methods are
interleaved (their order rotates per repeat) and each point is the median over repeats of
``committed tokens / wall seconds`` for the whole batch, prefill included, and of the decode
alone (the tokens after each sequence's first, over the seconds after the prompts' forward): the
schedule predicts the decode, at its profile's context, so the decode-only figure is the one to
hold against the prediction; the whole-batch one is what a user waits for. Identity: each
method's outputs against the engines' plain decoding, sequence by sequence (exact in
float32); an output that parts is counted as a near-tie where the target's top-2 logit gap at the
first differing place is below ``NEAR_TIE`` (runtime/lossless.py: 16-bit batched kernels sum in
another order, so two correct decoders may part there).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from specplan.runtime.build import eos_ids
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.lossless import NEAR_TIE, check_lossless, divergence_gap
from specplan.runtime.runner import PlanRunner
from specplan.runtime.timing import now


@dataclass(frozen=True)
class BatchPoint:
    """One method at one batch size."""

    batch: int
    method: str  # schedule | plan | plain-runtime | plain
    configuration: str
    tokens_per_s: float  # median over repeats, whole batch, prefill included
    predicted_tokens_per_s: float | None  # the schedule's row for exactly this batch, else None
    new_tokens: int
    identical: int  # sequences token-identical to plain-runtime's
    decode_tokens_per_s: float = 0.0  # median over repeats, the decode alone (prefill apart)
    near_ties: int = 0  # of the others, those that first part where the target's top-2 gap is < NEAR_TIE

    def as_record(self) -> dict:
        return {"batch": self.batch, "method": self.method, "configuration": self.configuration,
                "tokens_per_s": round(self.tokens_per_s, 3), "decode_tokens_per_s": round(self.decode_tokens_per_s, 3),
                "new_tokens": self.new_tokens,
                "predicted_tokens_per_s": None if self.predicted_tokens_per_s is None
                else round(self.predicted_tokens_per_s, 3), "identical": self.identical, "near_ties": self.near_ties}


# A decoder: prompts -> (outputs per prompt, whole-batch seconds, decode-only tokens/s)
Decoder = Callable[[list[list[int]], int], tuple[list[tuple[int, ...]], float, float]]


def decode_rate(new_tokens: int, sequences: int, seconds: float, prefill_seconds: float) -> float:
    """Tokens per second of the decode phase when every sequence's first new token is the prefill's.

    >>> decode_rate(40, 4, 2.5, 0.5)
    18.0
    """
    decoded = new_tokens - sequences
    return decoded / (seconds - prefill_seconds) if seconds > prefill_seconds and decoded > 0 else 0.0


def engines_decoder(runner: PlanRunner, batch: int, stages, scheduled: bool, stop_at_eos: bool = True) -> tuple[str, Decoder]:
    """(configuration, decoder) of ``batch`` engines of ``stages`` (the plan's, a schedule row's, or none: plain
    decoding), one per sequence, their forwards batched over sessions of their own (runtime/batcher.py);
    ``scheduled``: each round plays the schedule's row for the sequences in flight, else ``stages``."""
    together = runner.engines_together(batch, tuple(stages), scheduled, stop_at_eos, own=True)
    configuration = together.choice(batch).played if scheduled else together.plan.summary()

    def decode(prompts: list[list[int]], max_new_tokens: int):
        result = together.generate(prompts, max_new_tokens, [SamplingConfig()] * batch)
        return [sequence.token_ids for sequence in result.sequences], result.seconds, result.decode_tokens_per_s
    return configuration, decode


class _PrefillClock(LogitsProcessor):
    """Notes when ``generate`` first scores a step: its prefill forward has just ended."""

    def __init__(self, device: torch.device):
        self.device = device
        self.first: float | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.first is None:
            self.first = now(self.device)
        return scores


def generate_decoder(runner: PlanRunner, stop_at_eos: bool = True) -> Decoder:
    """transformers ``generate`` (greedy) over the batch, left-padded, stopping each row at EOS
    (``stop_at_eos`` False: at ``max_new_tokens`` only; its EOS becomes an id no token has)."""
    model, device = runner.target.model, runner.device
    eos = sorted(eos_ids(runner.target))
    stop = eos if stop_at_eos else []
    pad = runner.target.tokenizer.pad_token_id
    pad = eos[0] if pad is None else pad

    @torch.inference_mode()
    def decode(prompts: list[list[int]], max_new_tokens: int):
        width = max(len(prompt) for prompt in prompts)
        ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long, device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long, device=device)
        clock = _PrefillClock(device)
        start = now(device)
        output = model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                                eos_token_id=stop or [model.config.vocab_size], pad_token_id=pad, logits_processor=LogitsProcessorList([clock]))
        seconds = now(device) - start
        prefill = seconds if clock.first is None else clock.first - start
        tokens = [_until_eos(row[width:].tolist(), set(stop)) for row in output]
        return tokens, seconds, decode_rate(sum(len(t) for t in tokens), len(tokens), seconds, prefill)
    return decode


def _until_eos(tokens: list[int], stop: set[int]) -> tuple[int, ...]:
    for index, token in enumerate(tokens):
        if token in stop:
            return tuple(tokens[: index + 1])
    return tuple(tokens)


def _methods(runner: PlanRunner, batch: int, built: dict,
             stop_at_eos: bool = True) -> dict[str, tuple[str, Decoder, float | None]]:
    """name -> (configuration, decoder, predicted tokens/s); ``built`` keeps each batch's engines."""
    plan = runner.plan
    row = plan.schedule.row_for(batch) if plan.schedule is not None else None
    exact = row is not None and row.batch == batch
    chosen = row.stages if row is not None else plan.stages  # the schedule's row for this batch
    if batch not in built:
        built[batch] = {name: engines_decoder(runner, batch, stages, scheduled, stop_at_eos) for name, stages, scheduled
                        in (("schedule", chosen, True), ("plan", plan.stages, False), ("plain-runtime", (), False))}
    engines = built[batch]
    plain = row.plain_tokens_per_s if exact else None
    return {"schedule": (*engines["schedule"], row.tokens_per_s if exact else None),
            "plan": (*engines["plan"], row.plan_tokens_per_s if exact else None),
            "plain-runtime": (engines["plain-runtime"][0] + " (engines)", engines["plain-runtime"][1], plain),
            "plain": ("transformers generate, left padding", generate_decoder(runner, stop_at_eos), plain)}


def measure_batch(runner: PlanRunner, prompts: Sequence[list[int]], batch: int, max_new_tokens: int,
                  repeats: int, built: dict | None = None, stop_at_eos: bool = True) -> list[BatchPoint]:
    """Every method at ``batch`` on the first ``batch`` prompts (cycled when there are fewer);
    ``built`` keeps engines between batch sizes; ``stop_at_eos`` False: every sequence decodes
    ``max_new_tokens`` (a fixed-length throughput measurement)."""
    chosen = [list(prompts[index % len(prompts)]) for index in range(batch)]
    methods = _methods(runner, batch, {} if built is None else built, stop_at_eos)
    runnable = list(methods)
    for name in runnable:  # warm-up: allocator, kernels, caches
        methods[name][1](chosen, min(8, max_new_tokens))
    rates: dict[str, list[float]] = {name: [] for name in runnable}
    decode_rates: dict[str, list[float]] = {name: [] for name in runnable}
    outputs: dict[str, list[tuple[int, ...]]] = {}
    for repeat in range(repeats):
        shift = repeat % len(runnable)
        for name in [*runnable[shift:], *runnable[:shift]]:
            tokens, seconds, decode = methods[name][1](chosen, max_new_tokens)
            committed = sum(len(t) for t in tokens)
            rates[name].append(committed / seconds if seconds > 0 else 0.0)
            decode_rates[name].append(decode)
            outputs[name] = tokens
    reference = outputs["plain-runtime"]
    near_tie = _near_tie_rule(runner, chosen, reference)
    points = []
    for name, (configuration, _decoder, predicted) in methods.items():
        checks = [check_lossless(base, output) for base, output in zip(reference, outputs[name])]
        points.append(BatchPoint(batch, name, configuration, statistics.median(rates[name]), predicted,
                                 sum(len(t) for t in outputs[name]), sum(check.identical for check in checks),
                                 statistics.median(decode_rates[name]),
                                 sum(near_tie(row, check.index) for row, check in enumerate(checks) if not check.identical)))
    return points


def _near_tie_rule(runner: PlanRunner, prompts: list[list[int]], reference: list[tuple[int, ...]]):
    """(sequence, position) -> whether the target's top-2 logit gap after the reference's prefix there
    is a near-tie (runtime/lossless.py; one full forward per place, each place once)."""
    gaps: dict[tuple[int, int], float] = {}

    def near_tie(row: int, position: int) -> bool:
        if (row, position) not in gaps:
            gaps[row, position] = divergence_gap(runner.target.model, prompts[row], reference[row], position)
        return gaps[row, position] < NEAR_TIE
    return near_tie


PLAIN_METHODS = ("plain", "plain-runtime")


def crossover(points: Sequence[BatchPoint], method: str = "plan", decode: bool = False) -> int | None:
    """The smallest measured batch from which plain decoding (the faster of ``plain`` and
    ``plain-runtime``) is at least as fast as ``method`` at every larger measured batch (None:
    ``method`` stays faster at the largest): the schedule's crossover (planner-math.md 11.2),
    measured on whole-batch goodput, or on the decode alone with ``decode``."""
    batches = sorted({point.batch for point in points})
    rate = {(p.batch, p.method): p.decode_tokens_per_s if decode else p.tokens_per_s for p in points}
    found = None
    for batch in reversed(batches):
        plain = max(rate.get((batch, name), 0.0) for name in PLAIN_METHODS)
        if plain >= rate.get((batch, method), 0.0):
            found = batch
        else:
            break
    return found


def table(points: Sequence[BatchPoint]) -> str:
    """Markdown: one row per batch and method, measured beside predicted."""
    lines = ["| batch | method | configuration | measured tok/s | decode-only tok/s | predicted tok/s (decode) | "
             "identical |", "|---|---|---|---|---|---|---|"]
    for p in points:
        predicted = "-" if p.predicted_tokens_per_s is None else f"{p.predicted_tokens_per_s:.1f}"
        ties = f" (+{p.near_ties} near-tie{'s' if p.near_ties > 1 else ''})" if p.near_ties else ""
        lines.append(f"| {p.batch} | {p.method} | {p.configuration} | {p.tokens_per_s:.1f} | "
                     f"{p.decode_tokens_per_s:.1f} | {predicted} | {p.identical}/{p.batch}{ties} |")
    return "\n".join(lines)


def measure_batches(runner: PlanRunner, prompts: Sequence[list[int]], batches: Sequence[int], max_new_tokens: int,
                    repeats: int, progress: Callable[[str], None] | None = None,
                    stop_at_eos: bool = True) -> list[BatchPoint]:
    """:func:`measure_batch` at every batch size, in order."""
    points, built = [], {}
    for batch in batches:
        points.extend(measure_batch(runner, prompts, batch, max_new_tokens, repeats, built, stop_at_eos))
        if progress is not None:
            progress(f"batch {batch} measured")
    return points


def report(points: Sequence[BatchPoint], plan, meta: dict) -> tuple[str, dict]:
    """The markdown (table, then measured vs predicted crossover) and the JSON document."""
    schedule = plan.schedule
    predicted = schedule.crossover_batch if schedule is not None else None
    measured, decode = crossover(points), crossover(points, decode=True)
    shown = "n/a (the plan has no schedule)" if schedule is None else (predicted if predicted is not None else "none")
    text = (table(points) + "\n\ncrossover batch (plain decoding at least as fast as the batch-1 plan from here on): "
            f"measured {_batch(measured)} (decode only {_batch(decode)}), predicted {shown}\n")
    document = {**meta, "points": [point.as_record() for point in points],
                "crossover_batch": {"measured": measured, "measured_decode_only": decode, "predicted": predicted}}
    return text, document


def _batch(batch: int | None) -> str:
    return "none" if batch is None else str(batch)
