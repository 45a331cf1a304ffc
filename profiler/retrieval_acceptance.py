"""Rank acceptance of retrieval drafters, alone and grafted beside a model's children.

Replaying the target's greedy output round by round, as the runtime plays it (see
:mod:`.acceptance`): a round's draft starts at its root, and a round that accepts a tokens
at output position t is followed by one at t + a + 1. At a round start the retrieval
drafter is given the committed text (and, for Token Recycling, the target's logits after
every earlier token, as the runtime's forwards would have fed its table); within the round
its table stays as it was at the root, and deeper nodes are looked up with the root's
context followed by the path, as the runtime's tree growth does.

- ``accepted_hist`` / ``alpha``: chains of the drafter's sequence proposal (``chain``),
  called only at the round starts of a gamma-chain runtime (Leviathan et al., arXiv
  2211.17192; :func:`~.acceptance.chain_rounds`).
- ``rank_accept[k]`` (Sequoia's positional acceptance, arXiv 2402.12374): how often the
  target's token is the (k+1)-th candidate, at the nodes a width-W, depth-gamma tree round
  reaches (its root and its accepted path, :func:`~.acceptance.tree_round_positions`). This
  sizes a retrieval drafter's own tree (``ngram:N`` with several continuations, ``recycle``,
  ``cache``).
- ``retrieval_rank_accept[j]`` (Graft, arXiv 2605.20104; docs/planner-math.md section 3): the same
  for the candidates left after removing the model drafter's top-B children at that
  position (de-duplication), i.e. the acceptance of the j-th *extra* sibling with the
  model's siblings present, at the nodes a round of that grafted tree (the model's B
  children plus W extras per node) reaches. Extended vector for the tree DP: [p_1..p_B, r_1..r_R].

Each statistic replays its own rounds from a freshly reset drafter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from specplan.profiler.acceptance import AcceptanceCounter, tree_round_positions


@torch.inference_mode()
def _rank(candidates: Sequence[int], token: int) -> int:
    return candidates.index(token) if token in candidates else -1


class _RoundReplay:
    """A reset retrieval drafter brought to successive round roots of one prompt's output."""

    def __init__(self, drafter, prompt_ids: Sequence[int], output_ids: Sequence[int],
                 target_logits: torch.Tensor | None):
        drafter.reset()
        self.drafter = drafter
        self.context = list(prompt_ids)
        self.output = list(output_ids)
        self.target_logits = target_logits  # [len(prompt) + len(output), vocab] or None
        self.observe = drafter.observe if drafter.learns_from_verifier else None
        self.fed = 0  # tokens whose target row the drafter has seen
        self.root = -1  # output position of the round being played
        self.committed: list[int] = []

    def start_round(self, position: int) -> list[int]:
        """Committed text before output ``position``; the drafter has seen it (target rows but the root's)."""
        committed = self.context + self.output[:position]
        if self.observe is not None and self.target_logits is not None and len(committed) - 1 > self.fed:
            self.observe(committed[self.fed : -1], self.target_logits[self.fed : len(committed) - 1])
            self.fed = len(committed) - 1
        self.drafter.prepare(committed)
        self.root, self.committed = position, committed
        return committed

    def candidates(self, position: int, start: int, count: int) -> list[int]:
        """Ranked candidates at ``position`` in the round rooted before ``start`` (path = output[start:position])."""
        if start != self.root:
            self.start_round(start)
        context = self.committed[-self.drafter.context_tokens:] + self.output[start:position]
        return list(self.drafter.successors(context, count).tokens)


def _replay_chains(counter: AcceptanceCounter, replay: _RoundReplay,
                   chain: Callable[[list[int], int], Sequence[int]]) -> None:
    """The gamma-chain runtime's rounds: ``chain`` at each round start only, timed. A round
    whose draft matches the output up to its end is censored (:meth:`AcceptanceCounter.add_censored`)."""
    output = replay.output
    start = 0
    while start < len(output):
        committed = replay.start_round(start)
        begin = time.perf_counter()
        proposal = list(chain(committed, counter.gamma))
        counter.seconds += time.perf_counter() - begin
        counter.calls += 1
        drafted = min(len(proposal), counter.gamma)
        seen = min(drafted, len(output) - start)
        accepted = 0
        while accepted < seen and proposal[accepted] == output[start + accepted]:
            accepted += 1
        if accepted == seen < drafted:
            counter.add_censored(accepted, drafted)
            break
        counter.add_chain(accepted, drafted=drafted)
        start += accepted + 1


def _replay_tree_ranks(counter: AcceptanceCounter, replay: _RoundReplay) -> None:
    """Ranks of the target's token at the nodes a width-W, depth-gamma tree round reaches."""
    ranks: dict[int, int] = {}

    def accepted_at(position: int, start: int) -> bool:
        ranks[position] = _rank(replay.candidates(position, start, counter.width), replay.output[position])
        return ranks[position] >= 0

    reached = tree_round_positions(len(replay.output), counter.gamma, accepted_at)
    counter.add_ranks([ranks[position] for position in reached])


def _replay_graft_ranks(graft_counter: AcceptanceCounter, replay: _RoundReplay, model_top: torch.Tensor,
                        count: int) -> None:
    """Ranks among the extras (candidates not among the model's children ``model_top[position]``),
    -1 where the model has the token, at the nodes a round of the grafted tree reaches."""
    ranks: dict[int, int] = {}

    def accepted_at(position: int, start: int) -> bool:
        truth = replay.output[position]
        siblings = set(model_top[position].tolist())
        extras = [token for token in replay.candidates(position, start, count) if token not in siblings]
        ranks[position] = -1 if truth in siblings else _rank(extras[: graft_counter.width], truth)
        return truth in siblings or ranks[position] >= 0

    reached = tree_round_positions(len(replay.output), graft_counter.gamma, accepted_at)
    graft_counter.add_ranks([ranks[position] for position in reached])


def replay_retrieval(counter: AcceptanceCounter, drafter, chain: Callable[[list[int], int], Sequence[int]],
                     prompt_ids: Sequence[int], output_ids: Sequence[int], *,
                     target_logits: torch.Tensor | None = None, model_top: torch.Tensor | None = None,
                     graft_counter: AcceptanceCounter | None = None) -> None:
    """Replay one prompt's greedy output through a retrieval tree drafter, round by round.

    Parameters
    ----------
    counter : gets the chain histogram (``chain``, called at the round starts of a gamma-chain
        runtime and timed for ``ms_per_call``) and the ranks of the target's token among the
        drafter's ``counter.width`` candidates at the nodes a tree round reaches.
    drafter : a RetrievalTreeDrafter (reset here before each replay: tables are per prompt, as
        at run time). ``chain`` may use the same object.
    chain : the sequence proposal, ``chain(committed, gamma) -> tokens``.
    target_logits : [len(prompt) + len(output), vocab] teacher-forced target logits; fed to a
        drafter with ``observe`` for every token before a round's root.
    model_top : [len(output), B] the model drafter's top-B tokens at each output position;
        with ``graft_counter``, the ranks among the remaining candidates go there.
    """
    _replay_chains(counter, _RoundReplay(drafter, prompt_ids, output_ids, target_logits), chain)
    _replay_tree_ranks(counter, _RoundReplay(drafter, prompt_ids, output_ids, target_logits))
    if graft_counter is not None and model_top is not None:
        count = max(counter.width, graft_counter.width)
        _replay_graft_ranks(graft_counter, _RoundReplay(drafter, prompt_ids, output_ids, target_logits),
                            model_top, count)
