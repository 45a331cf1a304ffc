"""The bounds on what an input may ask for, in one place (docs/guide.md, "Files specplan writes,
and the bounds on what it reads").

The planner's search, a plan read from disk and the runtime all check against these, so that
a typo such as ``--max-budget 1000000000`` is a one-line error instead of a hang.
"""

from __future__ import annotations

# Tree nodes (root included) a stage may verify in one forward: the largest budget the
# planner searches and the largest tree a plan may hold. Beyond the widths a profile measures
# (at most 64 in the stored profiles) T(n) is extrapolated, so larger trees are guesses anyway.
MAX_TREE_BUDGET = 256
# Deepest tree, and longest draft chain (gamma), the planner searches or a plan may hold.
MAX_DEPTH = 64
# Longest chain a profile counts a match-only lookup's acceptance over (``ngram:N:K``, K >= 2), and so
# the longest the planner may choose for one: the widest verify a latency curve times (64) less its root.
LONGEST_LOOKUP_CHAIN = 63
# Cached tokens a latency measurement may sit on (``profile --context``), and the cache it sits on where
# no prompts say otherwise (a latency-only profile; a full one takes its caches from its prompts).
MIN_CONTEXT, MAX_CONTEXT = 16, 32768
LATENCY_CONTEXT = 256
# Stages in a chain drafter -> ... -> target that a plan may list.
MAX_STAGES = 8
# Size of a YAML document specplan reads (profiles, plans, SKU tables, manifests): the stored
# ones are under 10 KB; anything this large is not one of ours.
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024


def check_count(value: object, name: str, low: int, high: int) -> int:
    """``value`` as an int in ``[low, high]``; ValueError with a one-line reason otherwise.

    Rejects booleans and non-integral numbers (a gamma of 2.7 is not truncated to 2)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        number = float(value)
        integer = int(number)
    except (ValueError, OverflowError):
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if number != integer:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not low <= integer <= high:
        raise ValueError(f"{name} = {integer} is out of range; use {low} to {high}")
    return integer


def grown_chain(chain: int, longest: int = LONGEST_LOOKUP_CHAIN) -> int:
    """The chain after one that was accepted whole (a lookup's, runtime/fallback.py ``ChainGrowth``, and a
    prediction's, runtime/drafters/prediction.py; docs/planner-math.md sections 12.5 and 12.6): its verify
    width doubles, ``c + 1 -> 2 (c + 1)``, up to ``longest``. Doubling the width rather than the chain keeps
    every verify on a width the profile times (2, 4, 8, 16, 32, 64 from a chain of 1; 16, 32, 64 from 15):
    llama.cpp's quantized kernels compute rows in tiles, so a chain of 16 (a verify of 17) costs a tile more
    than one of 15 (docs/results.md, "llama.cpp's T(n) between profiled widths").

    >>> [grown_chain(chain) for chain in (1, 3, 7, 15, 31, 63)], grown_chain(12), grown_chain(5, longest=8)
    ([3, 7, 15, 31, 63, 63], 25, 8)
    """
    return min(2 * chain + 1, max(chain, longest))
