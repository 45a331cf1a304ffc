"""Lossless, checked: where an output first parts from the target's own, and whether that place is
a numerical near-tie (the target's top-2 logit gap there; docs/planner-math.md section 5).

In float32 the plan's greedy output is token-identical to the target's. In bfloat16 a forward
over n tokens is not bit-identical to n single-token forwards, so two correct decoders may part
where the target's two best tokens are within rounding of each other: a *near-tie*, named with
its gap rather than reported as a bare difference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from specplan.runtime.backend import Session

NEAR_TIE = 0.5  # logits: a bf16 forward over n tokens differs from n decode steps by up to ~0.1-0.3
VERIFY_WIDTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # the verify widths a divergence is decoded at


@dataclass(frozen=True)
class LosslessCheck:
    """An output against the reference: where they first differ and the target's top-2 gap there."""

    identical: bool
    index: int | None = None  # first differing position (the shorter length when one is a prefix)
    gap: float | None = None  # target's top-2 logit gap after the common prefix (None: not computed)
    # past a near-tie, on a backend whose wide decodes round differently: the narrowest verify width that decodes
    # the output's token there (0: none of VERIFY_WIDTHS does; None: not looked for)
    flip_width: int | None = None

    @property
    def near_tie(self) -> bool:
        return not self.identical and self.gap is not None and self.gap < NEAR_TIE


def first_divergence(reference: Sequence[int], output: Sequence[int]) -> int | None:
    """Index of the first differing token; the shorter length when one is a strict prefix; None if equal.

    >>> first_divergence([1, 2, 3], [1, 2, 3]) is None
    True
    >>> first_divergence([1, 2, 3], [1, 5, 3])
    1
    >>> first_divergence([1, 2, 3], [1, 2])
    2
    """
    for index, (a, b) in enumerate(zip(reference, output)):
        if a != b:
            return index
    if len(reference) != len(output):
        return min(len(reference), len(output))
    return None


def check_lossless(reference: Sequence[int], output: Sequence[int],
                   gap_at: Callable[[int], float | None] | None = None) -> LosslessCheck:
    """Compare ``output`` with ``reference``; ``gap_at(index)`` gives the target's top-2 gap there."""
    index = first_divergence(reference, output)
    if index is None:
        return LosslessCheck(True)
    return LosslessCheck(False, index, gap_at(index) if gap_at is not None else None)



@torch.inference_mode()
def divergence_gap(model: "torch.nn.Module | Session", prompt_ids: list[int], reference: Sequence[int],
                   index: int) -> float:
    """The target's top-2 logit gap after ``prompt_ids + reference[:index]`` (one full forward; a
    session of any backend is reset, extended over those tokens and reset again)."""
    if isinstance(model, Session):
        model.reset()
        logits = model.extend(list(prompt_ids) + list(reference[:index]))[-1]  # [vocab]
        model.reset()
        top = torch.topk(logits, 2).values
        return float(top[0] - top[1])
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids) + list(reference[:index])], device=device)  # [1, length]
    logits = model(input_ids=ids, use_cache=False).logits[0, -1].float()  # [vocab]
    top = torch.topk(logits, 2).values
    return float(top[0] - top[1])


@torch.inference_mode()
def width_flip(session: Session, prompt_ids: list[int], reference: Sequence[int], index: int, token: int,
               widths: Sequence[int] = VERIFY_WIDTHS) -> int:
    """The narrowest of ``widths`` whose decode gives ``token`` the target's argmax after ``prompt_ids +
    reference[:index]``: the text's last ``w`` tokens decoded together after the rest (prefilled in one
    extend, as :func:`divergence_gap`'s forward is), as a verify of ``w`` tokens ending there computes them;
    0 where none does (docs/backends.md: llama.cpp's decodes of n tokens
    are not bit-identical to n one-token decodes, so an output that parts past a near-tie is the target's own
    where some verify width chooses its token). The session is reset before and after."""
    text = list(prompt_ids) + list(reference[:index])
    try:
        return next((w for w in widths if w <= len(text) and int(torch.argmax(row_at_width(session, text, w))) == token), 0)
    finally:
        session.reset()


@torch.inference_mode()
def row_at_width(session: Session, text: list[int], width: int) -> torch.Tensor:
    """The target's logits row after ``text`` [vocab], its last ``width`` tokens decoded in one extend after the
    rest (the session is reset first and left holding ``text``)."""
    session.reset()
    if len(text) > width:
        session.extend(text[:-width])
    return session.extend(text[-width:])[-1]
