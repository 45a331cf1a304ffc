"""The target distribution a verifier must reproduce: temperature and nucleus (top-p).

Lossless speculative sampling (Leviathan et al., arXiv 2211.17192; Chen et al., arXiv
2302.01318) reproduces whatever distribution ``p`` the target would have sampled from, so the
temperature and top-p transforms are applied to the target's logits here and the verifier
only ever sees probabilities. A drafter that wants high acceptance should apply the same
transforms to its own logits, but losslessness does not depend on it.
"""

from __future__ import annotations

import torch


def target_probabilities(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Sampling distribution float32 [n, vocab] from logits [n, vocab].

    Parameters
    ----------
    logits : [n, vocab] (or [vocab]) raw verifier logits.
    temperature : 0 means greedy: a one-hot row on the argmax (the first maximum on ties,
        as ``torch.argmax``, so sampling verification at temperature 0 agrees with greedy
        verification). Otherwise ``softmax(logits / temperature)``.
    top_p : nucleus sampling (Holtzman et al., arXiv 1904.09751): keep the smallest set
        of most probable tokens whose mass reaches ``top_p`` (the token that crosses it is
        kept; at least one token always is) and renormalise. 1.0 keeps everything.

    Raises
    ------
    ValueError
        If ``temperature < 0`` or ``top_p`` is not in (0, 1].

    Example
    -------
    >>> target_probabilities(torch.tensor([[0.0, 2.0, 1.0]]), 0.0).tolist()
    [[0.0, 1.0, 0.0]]
    >>> target_probabilities(torch.log(torch.tensor([[0.5, 0.3, 0.2]])), 1.0, top_p=0.7).tolist()
    [[0.625, 0.375, 0.0]]
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1 = no nucleus filtering), got {top_p}")
    logits = logits.float()
    if temperature == 0:
        probs = torch.zeros_like(logits)
        return probs.scatter_(-1, logits.argmax(dim=-1, keepdim=True), 1.0)
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of strictly more probable tokens
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    filtered = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
    return filtered / filtered.sum(dim=-1, keepdim=True)
