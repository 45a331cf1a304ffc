"""``--batch-sizes 1,2,4,8``: the batch sizes T(n, b) is measured at (profile) or modelled at (plan --sku)."""

from __future__ import annotations

from specplan.core.errors import SpecplanError

LARGEST_BATCH = 4096


def add_batch_sizes_option(parser, help_text: str) -> None:
    parser.add_argument("--batch-sizes", default=None, metavar="B,B,...", help=help_text)


def parse_batch_sizes(text: str | None, flag: str = "--batch-sizes") -> tuple[int, ...] | None:
    """``"1,2,4"`` -> ``(1, 2, 4)``: distinct, ascending, batch 1 always included; None when not given.

    >>> parse_batch_sizes("8,2")
    (1, 2, 8)
    """
    if text is None:
        return None
    try:
        values = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise SpecplanError(f"{flag} {text!r} must be comma-separated whole numbers, e.g. 1,2,4,8") from None
    if not values or min(values) < 1 or max(values) > LARGEST_BATCH:
        raise SpecplanError(f"{flag} {text!r}: give batch sizes from 1 to {LARGEST_BATCH}, e.g. 1,2,4,8")
    return tuple(sorted(values | {1}))
