"""Acceptance of a drafter's tokens by a verifier, from the verifier's own greedy outputs.

At temperature 0 a chain drafted from position t is accepted up to the first token where
the drafter's choice differs from the verifier's greedy continuation. Replaying the
verifier's output therefore gives, with one drafter forward per prompt (teacher forcing on
the verifier's tokens, which are exactly the drafts as long as they match):

- ``accepted_hist[a]``: chains of length gamma (one per start position) with a accepted;
- ``alpha``: the per-token acceptance that maximises the likelihood of that histogram
  under Leviathan et al.'s i.i.d. model (arXiv 2211.17192): accepted / (accepted + rejections);
- ``rank_accept[k]``: how often the verifier's token is the drafter's (k+1)-th ranked
  candidate (Sequoia's positional acceptance, arXiv 2402.12374).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch



@dataclass
class AcceptanceCounter:
    """Accumulates replay statistics for one (drafter, verifier) pair."""

    gamma: int
    width: int = 8
    hist: list[int] = field(default_factory=list)
    rank_hits: list[int] = field(default_factory=list)
    positions: int = 0
    seconds: float = 0.0
    calls: int = 0

    def __post_init__(self) -> None:
        self.hist = [0] * (self.gamma + 1)
        self.rank_hits = [0] * self.width

    def add_matches(self, matches: Sequence[bool]) -> None:
        """``matches[t]``: the drafter's top choice at output position t equals the verifier's token."""
        run = 0
        runs = [0] * len(matches)
        for index in range(len(matches) - 1, -1, -1):
            run = run + 1 if matches[index] else 0
            runs[index] = run
        for start in range(0, len(matches) - self.gamma + 1):
            self.hist[min(runs[start], self.gamma)] += 1

    def add_chain(self, accepted: int) -> None:
        self.hist[min(accepted, self.gamma)] += 1

    def add_ranks(self, ranks: Sequence[int]) -> None:
        """Rank (0-based) of the verifier's token among the drafter's top ``width``; -1 if absent."""
        for rank in ranks:
            self.positions += 1
            if 0 <= rank < self.width:
                self.rank_hits[rank] += 1

    @property
    def alpha(self) -> float:
        accepted = sum(a * count for a, count in enumerate(self.hist))
        rejections = sum(self.hist[: self.gamma])
        return accepted / (accepted + rejections) if accepted + rejections else 0.0

    @property
    def rank_accept(self) -> tuple[float, ...]:
        if not self.positions:
            return ()
        return tuple(hit / self.positions for hit in self.rank_hits)


@torch.inference_mode()
def replay_model(counter: AcceptanceCounter, drafter: torch.nn.Module, prompt_ids: Sequence[int],
                 output_ids: Sequence[int], device: torch.device) -> torch.Tensor:
    """One teacher-forced drafter forward over prompt + output; count matches and ranks.

    Returns the drafter's top-``width`` tokens at each output position, long [output, width]
    (the model's siblings that retrieval grafts are measured beside).
    """
    if not output_ids:
        return torch.zeros(0, counter.width, dtype=torch.long)
    ids = torch.tensor([list(prompt_ids) + list(output_ids)], device=device)  # [1, len]
    logits = drafter(input_ids=ids, use_cache=False).logits[0].float()  # [len, vocab]
    start = len(prompt_ids) - 1
    predicting = logits[start : start + len(output_ids)]  # [output, vocab]: row t predicts output[t]
    top = torch.topk(predicting, counter.width, dim=-1).indices.cpu()  # [output, width]
    truth = torch.tensor(list(output_ids))[:, None]  # [output, 1]
    hits = top == truth  # [output, width]
    ranks = torch.where(hits.any(-1), hits.float().argmax(-1), torch.full((len(output_ids),), -1)).tolist()
    counter.add_matches([rank == 0 for rank in ranks])
    counter.add_ranks(ranks)
    return top
