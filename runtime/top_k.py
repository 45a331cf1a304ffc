"""The ``count`` largest entries of each row of logits, through block maxima on a CPU, and
those entries as probabilities (``top_rows``) (docs/planner-math.md section 12.2).

``torch.topk`` over a vocabulary row is a selection over every entry, and on a CPU it costs
about twice an ``amax`` reduction pass; reading Token Recycling's rows and the live scores' rows
after every target forward makes it a per-round cost of the closed loop. The block method is
exact: split each row into blocks of ``BLOCK`` entries and take each block's maximum (one
vectorised reduction); the ``count`` largest entries of the row lie in the ``count`` blocks with
the largest maxima (a block holding one of them has a maximum at least as large, and at most
``count`` blocks hold one), so a top-k over those ``count * BLOCK`` entries gives the row's
values. Among exactly equal values the index chosen may differ from ``torch.topk``'s.
On other devices (a GPU's top-k is one kernel), vocabularies no block size divides, and fewer
than ``BLOCK_ROWS`` rows, this is ``torch.topk``: right after a forward, with the caches cold, its
one call cost less than the block method's five on one or two rows (measured inside the adaptive
engine's loop), while from 4 rows on the block method is 3x faster.
"""

from __future__ import annotations

import torch

BLOCKS = (128, 64, 32)  # block sizes tried, largest first (128: fastest measured on the 2-core CPU)
BLOCK_ROWS = 4  # fewer rows: torch.topk


def top_logits(logits: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices), both [n, count], of the ``count`` largest logits of each row of [n, vocab],
    largest first (``count`` is capped at the vocabulary).

    >>> values, indices = top_logits(torch.arange(256.0).flip(0)[None, :], 3)
    >>> values.tolist(), indices.tolist()
    ([[255.0, 254.0, 253.0]], [[0, 1, 2]])
    """
    rows, vocab = logits.shape
    count = min(count, vocab)
    block = next((size for size in BLOCKS if vocab % size == 0 and vocab // size >= count), 0)
    if logits.device.type != "cpu" or not block or rows < BLOCK_ROWS:
        top = torch.topk(logits, count, dim=-1)
        return top.values, top.indices
    grid = logits.reshape(rows, vocab // block, block)
    chosen = torch.topk(grid.amax(dim=-1), count, dim=-1).indices  # [n, count] blocks
    gathered = grid.gather(1, chosen.unsqueeze(-1).expand(rows, count, block)).reshape(rows, count * block)
    top = torch.topk(gathered, count, dim=-1)
    return top.values, chosen.gather(1, top.indices // block) * block + top.indices % block


def top_rows(logits: torch.Tensor, count: int, normalized: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``count`` most probable next tokens of each row of logits [n, vocab] and their
    probabilities, both [n, count] (top-k of the logits, normalised by the row's logsumexp: no
    full softmax is materialised). Without ``normalized``, each row's weights are relative to its
    best token (``exp(top - top_0)``, the best is 1): the same ranks and ratios at a third less
    time, enough for every reader that uses ranks only (static shapes, the live replays).

    >>> ids, weights = top_rows(torch.log(torch.tensor([[0.1, 0.6, 0.3]])), 2, normalized=False)
    >>> ids.tolist(), [round(w, 3) for w in weights[0].tolist()]
    ([[1, 2]], [1.0, 0.5])
    """
    logits = logits.float()
    values, indices = top_logits(logits, count)
    scale = torch.logsumexp(logits, dim=-1, keepdim=True) if normalized else values[:, :1]
    return indices, torch.exp(values - scale)
