"""The schedule as a table (``specplan plan --explain``, ``plan --sku``): one row per batch size."""

from __future__ import annotations

from specplan.core.schedule import Schedule


def schedule_table(schedule: Schedule) -> str:
    """Per batch: the chosen configuration, its whole-batch tokens/s (goodput, SmartSpec arXiv
    2406.14066), plain decoding's, the speedup, and the batch-1 plan's tokens/s at that batch;
    then the crossover batch (planner-math.md section 11.2).

    >>> from specplan.core.schedule import ScheduleRow
    >>> rows = (ScheduleRow(1, "d -> t (sequence gamma 3)", ("stage",), 10.0, 100.0, 50.0, 2.0, 2.5, 100.0),
    ...         ScheduleRow(8, "t plain decoding", (), 80.0, 100.0, 100.0, 1.0, 1.0, 60.0))
    >>> print(schedule_table(Schedule(rows, 8)))  # doctest: +NORMALIZE_WHITESPACE
    schedule by batch size (measured latency; tokens/s of the whole batch):
    batch  ms/token     tok/s  plain tok/s  speedup  batch-1 plan tok/s  configuration
        1    10.000     100.0         50.0    2.000               100.0  d -> t (sequence gamma 3)
        8    80.000     100.0        100.0    1.000                60.0  t plain decoding
    crossover: plain decoding wins from batch 8
    """
    lines = [f"schedule by batch size ({schedule.source} latency; tokens/s of the whole batch):",
             f"{'batch':>5} {'ms/token':>9} {'tok/s':>9} {'plain tok/s':>12} {'speedup':>8} "
             f"{'batch-1 plan tok/s':>19}  configuration"]
    for row in schedule.rows:
        plan = f"{row.plan_tokens_per_s:.1f}" if row.plan_tokens_per_s > 0 else "-"
        lines.append(f"{row.batch:>5} {row.ms_per_token:>9.3f} {row.tokens_per_s:>9.1f} {row.plain_tokens_per_s:>12.1f} "
                     f"{row.speedup:>8.3f} {plan:>19}  {row.summary}")
    if schedule.crossover_batch is not None:
        lines.append(f"crossover: plain decoding wins from batch {schedule.crossover_batch}")
    else:
        lines.append(f"crossover: none up to batch {schedule.rows[-1].batch} (speculation wins at the largest batch)")
    return "\n".join(lines)
