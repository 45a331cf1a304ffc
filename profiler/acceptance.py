"""Acceptance of a drafter's tokens by a verifier, from the verifier's own greedy outputs.

At temperature 0 a chain drafted from position t is accepted up to the first token where
the drafter's choice differs from the verifier's greedy continuation. Replaying the
verifier's output therefore gives, with one drafter forward per prompt (teacher forcing on
the verifier's tokens, which are exactly the drafts as long as they match), every statistic
below.

Round by round, as the runtime plays (runtime/stage.py): a draft starts only at a round's
root. A round at output position t that accepts a tokens commits them and the bonus token,
so the next round starts at t + a + 1. Counting a chain at *every* position instead weights
a long copied stretch once per token although the runtime crosses it in a few rounds, and
over-predicts the accepted length (ngram:3, gamma 8, default model on CPU: predicted 2.10,
measured 1.39). So:

- ``accepted_hist[a]``: the rounds of a gamma-chain runtime (Leviathan et al., arXiv
  2211.17192) with a accepted: start at 0, jump to t + a + 1. A model drafter's round whose
  chain would run past the output is not counted. A retrieval drafter's is *censored*: its
  first c tokens matched the output's last c, so only A >= c is known. Long chains
  (a match-only lookup's G = 63) would otherwise lose every round that starts within G tokens of
  an output's end, most of a calibration output, so censored rounds are kept and the histogram is
  completed by the product-limit (Kaplan-Meier) estimate of P(A >= k) (Kaplan & Meier, JASA
  1958; docs/planner-math.md section 1), rounded to whole rounds (:func:`completed_histogram`).
- ``alpha``: the per-token acceptance that maximises the likelihood of that histogram under
  Leviathan et al.'s i.i.d. model (arXiv 2211.17192): accepted / (accepted + rejections), a
  censored round's c tokens counted as accepted with no rejection.
- ``rank_accept[k]``: Sequoia's positional acceptance (arXiv 2402.12374, section 3): the
  probability that the (k+1)-th ranked child of a node is the accepted one, which its tree
  DP applies at every node a round reaches. Sampled at the nodes a tree round reaches: the
  root at each round start and every node along the accepted path (a depth > 1 node's
  children are ranked at the accepted parent's position). The replayed tree is the widest
  one the statistic describes: ``width`` ranked children per node, depth ``gamma``; the path
  goes on while the verifier's token is among the drafter's top ``width``, and after a
  full-depth path the bonus position is skipped, as at run time. The frequencies are the
  maximum-likelihood estimate of Sequoia's rank distribution from those rounds (for rank 0
  on a chain, the same estimate as ``alpha``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from specplan.core.prompt_counts import PromptCounts, chain_alpha, completed_histogram
from specplan.runtime.backend import Session


def chain_rounds(matches: Sequence[bool], gamma: int) -> list[tuple[int, int]]:
    """``(start, accepted)`` of each round a gamma-chain runtime plays over ``matches``.

    ``matches[t]``: the drafter's token at output position t (drafted after the verifier's
    tokens 0..t-1) equals the verifier's. A round at t accepts the leading matches, at most
    gamma (Leviathan et al., arXiv 2211.17192), then the bonus token: the next round starts at
    t + accepted + 1. Rounds whose chain would run past the output are left out.

    >>> chain_rounds([True, True, True, False, True], 2)
    [(0, 2), (3, 0)]
    """
    rounds = []
    start = 0
    while start + gamma <= len(matches):
        accepted = 0
        while accepted < gamma and matches[start + accepted]:
            accepted += 1
        rounds.append((start, accepted))
        start += accepted + 1
    return rounds


def tree_round_positions(length: int, depth: int, accepted_at: Callable[[int, int], bool]) -> list[int]:
    """Output positions whose ranked children a depth-capped tree round reaches, in order.

    A round rooted before position ``start`` ranks children at ``start`` and, while
    ``accepted_at(position, start)`` says the verifier's token is one of them, at the next
    position, down to ``depth`` levels (Sequoia, arXiv 2402.12374). It commits the accepted
    path and the bonus token, so the next round starts after the bonus position.

    >>> tree_round_positions(6, 2, lambda position, start: True)
    [0, 1, 3, 4]
    """
    visited = []
    start = 0
    while start < length:
        accepted = 0
        while accepted < depth and start + accepted < length:
            visited.append(start + accepted)
            if not accepted_at(start + accepted, start):
                break
            accepted += 1
        start += accepted + 1
    return visited


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
    drafted_hist: list[int] = field(default_factory=list)  # [gamma + 1] once a round says how many it drafted
    censored: list[int] = field(default_factory=list)  # [gamma + 1]: rounds that matched c tokens when the output ended
    prompts: list[PromptCounts] = field(default_factory=list)  # each ended prompt's share (:meth:`end_prompt`)
    ended: PromptCounts = field(default_factory=PromptCounts)  # the totals when the last prompt ended

    def __post_init__(self) -> None:
        self.hist = [0] * (self.gamma + 1)
        self.censored = [0] * (self.gamma + 1)
        self.rank_hits = [0] * self.width

    def totals(self) -> PromptCounts:
        """Every count so far, as one :class:`PromptCounts`."""
        return PromptCounts(tuple(self.hist), tuple(self.censored), tuple(self.drafted_hist), tuple(self.rank_hits),
                            self.positions)

    def end_prompt(self) -> None:
        """Close one calibration prompt: what was counted since the last one ended joins ``prompts``
        (the profile's ``per_prompt``, core/prompt_counts.py)."""
        now = self.totals()
        self.prompts.append(now.minus(self.ended).trimmed())
        self.ended = now

    def add_matches(self, matches: Sequence[bool]) -> None:
        """One prompt's ``matches[t]`` (the drafter's top choice at output position t equals the
        verifier's token), counted per round of a gamma-chain runtime (:func:`chain_rounds`)."""
        for _, accepted in chain_rounds(matches, self.gamma):
            self.add_chain(accepted)

    def add_chain(self, accepted: int, drafted: int | None = None) -> None:
        """One round's chain with ``accepted`` draft tokens accepted, of ``drafted`` proposed (a
        retrieval drafter's lookup may find fewer than gamma, or none; None: not tracked)."""
        self.hist[min(accepted, self.gamma)] += 1
        if drafted is not None:
            self._add_drafted(drafted)

    def _add_drafted(self, drafted: int) -> None:
        if not self.drafted_hist:
            self.drafted_hist = [0] * (self.gamma + 1)
        self.drafted_hist[min(drafted, self.gamma)] += 1

    def add_censored(self, matched: int, drafted: int) -> None:
        """One round whose ``matched`` tokens all matched when the output ended, of ``drafted``
        proposed (more than ``matched``): its accepted length is at least ``matched``."""
        if not 0 <= matched < min(drafted, self.gamma):
            raise ValueError(f"a censored round matches fewer tokens ({matched}) than it drafted ({drafted}, gamma {self.gamma})")
        self.censored[matched] += 1
        self._add_drafted(drafted)

    @property
    def accepted_hist(self) -> tuple[int, ...]:
        """Rounds by accepted length 0..gamma, censored rounds completed (:func:`completed_histogram`)."""
        return tuple(completed_histogram(self.hist, self.censored))

    def add_ranks(self, ranks: Sequence[int]) -> None:
        """Rank (0-based) of the verifier's token among the drafter's top ``width``; -1 if absent.

        Every rank given is counted; :meth:`add_tree_ranks` picks the positions a tree round reaches.
        """
        for rank in ranks:
            self.positions += 1
            if 0 <= rank < self.width:
                self.rank_hits[rank] += 1

    def add_tree_ranks(self, ranks: Sequence[int]) -> None:
        """One prompt's ranks per output position, counted at the positions a width-``width``,
        depth-``gamma`` tree round reaches (:func:`tree_round_positions`; Sequoia arXiv 2402.12374)."""
        reached = tree_round_positions(len(ranks), self.gamma,
                                       lambda position, start: 0 <= ranks[position] < self.width)
        self.add_ranks([ranks[position] for position in reached])

    @property
    def alpha(self) -> float:
        """MLE of the i.i.d. per-token acceptance from the histogram (arXiv 2211.17192):
        accepted tokens / (accepted tokens + rejections); full-gamma rounds have no rejection."""
        return chain_alpha(self.hist, self.censored)

    @property
    def rank_accept(self) -> tuple[float, ...]:
        """Sequoia's positional acceptance p_1..p_W (arXiv 2402.12374) over the reached nodes."""
        if not self.positions:
            return ()
        return tuple(hit / self.positions for hit in self.rank_hits)


@torch.inference_mode()
def teacher_forced_logits(model: "torch.nn.Module | Session", ids: Sequence[int], device: torch.device) -> torch.Tensor:
    """Logits float32 [len(ids), vocab] on the CPU; row i follows token i. ``model`` may be a
    session of any backend: one extend over ``ids`` from an empty cache (left empty after)."""
    if isinstance(model, Session):
        model.reset()
        logits = model.extend(list(ids))
        model.reset()
        return logits.float().cpu()
    logits = model(input_ids=torch.tensor([list(ids)], device=device), use_cache=False).logits[0]
    return logits.float().cpu()


def replay_model(counter: AcceptanceCounter, drafter: "torch.nn.Module | Session", prompt_ids: Sequence[int],
                 output_ids: Sequence[int], device: torch.device) -> torch.Tensor:
    """One teacher-forced drafter forward over prompt + output; count rounds and ranks.

    The chain histogram counts the rounds of a gamma-chain runtime (:func:`chain_rounds`), the
    ranks the nodes a tree round reaches (:func:`tree_round_positions`). Returns the drafter's
    top-``width`` tokens at every output position, long [output, width] (the model's siblings
    that retrieval grafts are measured beside).
    """
    if not output_ids:
        return torch.zeros(0, counter.width, dtype=torch.long)
    logits = teacher_forced_logits(drafter, list(prompt_ids) + list(output_ids), device)  # [len, vocab]
    start = len(prompt_ids) - 1
    predicting = logits[start : start + len(output_ids)]  # [output, vocab]: row t predicts output[t]
    top = torch.topk(predicting, counter.width, dim=-1).indices.cpu()  # [output, width]
    truth = torch.tensor(list(output_ids))[:, None]  # [output, 1]
    hits = top == truth  # [output, width]
    ranks = torch.where(hits.any(-1), hits.float().argmax(-1), torch.full((len(output_ids),), -1)).tolist()
    counter.add_matches([rank == 0 for rank in ranks])
    counter.add_tree_ranks(ranks)
    return top
