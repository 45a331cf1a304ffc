"""Live acceptance: every retrieval drafter of the profile scored on the tokens the target
commits, while a request decodes, at no extra target forward (docs/planner-math.md section 12.1).

The replay is the profiler's (:mod:`specplan.profiler.retrieval_acceptance`), run online over
the request's committed tokens instead of a calibration prompt's greedy output:

- chains: virtual G-chain rounds (Leviathan et al., arXiv 2211.17192): at a round start the
  drafter's sequence proposal of G tokens is compared with the committed tokens; a round that
  accepts ``a`` is followed by one at ``t + a + 1`` (:func:`~specplan.profiler.acceptance.chain_rounds`);
- ranks: virtual tree rounds of width W and depth G (Sequoia, arXiv 2402.12374): at the root and
  along the accepted path, the rank of the committed token among the drafter's W candidates
  (:func:`~specplan.profiler.acceptance.tree_round_positions`), the table frozen at the root.

Token Recycling (arXiv 2408.08696) learns from the target's rows: the target's own forwards are
read through a :class:`~specplan.runtime.stage.StageRunner` listener, and only the row of each
committed token at a position before a virtual round's root is shown to the replayed table
(the teacher-forced rows the profiler feeds). The rows are kept as their top-k, enough for the
table's ranks. At temperature > 0 the indicator "the committed token is the k-th candidate" has
the expectation of the k-th deterministic candidate's acceptance (section 12.1), so the same
counts serve sampling.

A model drafter is scored only from the rounds it actually drafts (:meth:`LiveAcceptance.observe_chain`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specplan.planner.posterior import LiveCounts
from specplan.runtime.drafters.base import SamplingConfig

ROW_TOP = 8  # top-k of each target row kept for Token Recycling's table


class _Replay:
    """One drafter instance brought to successive virtual round roots of the request."""

    def __init__(self, drafter, rows: dict[int, tuple[list[int], list[float]]]):
        self.drafter = drafter
        self.rows = rows  # committed position -> (top ids [k], their probabilities [k]) of the target's row there
        self.fed = 0  # positions whose row the drafter has seen

    def reset(self) -> None:
        self.drafter.reset()
        self.fed = 0

    def start(self, committed: list[int], prepare: bool = True) -> None:
        """Show the drafter the request up to a round's root ``committed[-1]`` (``prepare``: index
        the text now, for a table read through ``successors``; a proposal indexes it itself)."""
        root = len(committed) - 1
        if self.drafter.learns_from_top_rows and root > self.fed:
            table = self.drafter.table
            for position in range(self.fed, root):
                row = self.rows.get(position)
                if row is not None:
                    table.set_row(committed[position], row[0], row[1])
            self.fed = root
        if prepare:
            self.drafter.prepare(committed)


class DrafterScore:
    """The online replay of one retrieval drafter: G-chain rounds and width-W tree ranks."""

    def __init__(self, name: str, chain_drafter, tree_drafter, rows, gamma: int = 8, width: int = 8):
        self.name = name
        self.gamma, self.width = gamma, width
        self.chain = _Replay(chain_drafter, rows)
        self.tree = _Replay(tree_drafter, rows)
        self.generator = torch.Generator()
        self.reset(0)

    def reset(self, prompt_length: int) -> None:
        self.chain.reset()
        self.tree.reset()
        self.prompt = prompt_length
        self.chain_start = 0  # output position of the next virtual chain round
        self.tree_start, self.tree_accepted = 0, 0  # the virtual tree round in progress
        self.hist = [0] * (self.gamma + 1)
        self.rank_hits = [0] * self.width
        self.positions = 0

    def counts(self) -> LiveCounts:
        return LiveCounts(tuple(self.hist), (), tuple(self.rank_hits), self.positions)

    def advance(self, committed: list[int]) -> None:
        """Play every virtual round the committed tokens now decide."""
        output = len(committed) - self.prompt
        while self.chain_start + self.gamma <= output:
            context = committed[: self.prompt + self.chain_start]
            self.chain.start(context, prepare=False)
            proposal = list(self.chain.drafter.propose(context, self.gamma, SamplingConfig(), self.generator).tokens)
            truth = committed[len(context): len(context) + self.gamma]
            accepted = 0
            while accepted < min(len(proposal), self.gamma) and proposal[accepted] == truth[accepted]:
                accepted += 1
            self.hist[accepted] += 1
            self.chain_start += accepted + 1
        self._advance_tree(committed, output)

    def _advance_tree(self, committed: list[int], output: int) -> None:
        drafter = self.tree.drafter
        while self.tree_start + self.tree_accepted < output:
            root = self.prompt + self.tree_start
            if self.tree_accepted == 0:
                self.tree.start(committed[:root])
            position = root + self.tree_accepted
            context = committed[max(0, root - drafter.context_tokens): position]
            candidates = list(drafter.successors(context, self.width).tokens)
            self.positions += 1
            token = committed[position]
            if token in candidates:
                self.rank_hits[candidates.index(token)] += 1
                self.tree_accepted += 1
                if self.tree_accepted < self.gamma:
                    continue
            self.tree_start += self.tree_accepted + 1  # a rejection, or the depth reached: the bonus follows
            self.tree_accepted = 0


class LiveAcceptance:
    """Scores of every retrieval drafter on one request, plus model drafters' own rounds.

    The engine calls ``begin_forward`` before a round's forwards (the position of the first fed
    token) and ``claim`` at each forward (its first position); it reduces the forwards to their
    rows' top-k, possibly several rounds later and all at once, and passes them to ``record_top``
    in order before ``commit``, which advances the replays over the committed tokens;
    ``observe_chain`` records a model drafter's sequence round.
    """

    def __init__(self, scores: Sequence[DrafterScore], rows: dict[int, tuple[list[int], list[float]]],
                 gamma: int = 8):
        self.scores = {score.name: score for score in scores}
        self.rows = rows  # shared with the scores' replays
        self.gamma = gamma
        self.model_hist: dict[str, list[int]] = {}
        self.model_censored: dict[str, list[int]] = {}
        self.model_rounds = 0
        self.pending: list[tuple[int, list[int], tuple[int, ...] | None, list, list]] = []  # id rows, prob rows
        self.first = 0
        # whether a replayed drafter learns from the target's rows (Token Recycling)
        self.wants_rows = any(score.tree.drafter.learns_from_top_rows for score in self.scores.values())

    def reset(self, prompt_length: int) -> None:
        self.rows.clear()
        self.pending = []
        self.model_hist, self.model_censored = {}, {}
        self.model_rounds = 0
        for score in self.scores.values():
            score.reset(prompt_length)

    def begin_forward(self, first_position: int) -> None:
        """The next target forward's first fed token sits at ``first_position`` of the request."""
        self.first = first_position

    def claim(self, count: int) -> int:
        """A target forward of ``count`` tokens happened: the request position of its first token."""
        first = self.first
        self.first += count
        return first

    def record_top(self, first: int, tokens: list[int], id_rows: list[list[int]], prob_rows: list[list[float]],
                   parents: tuple[int, ...] | None) -> None:
        """A target forward (tokens [n], the first at position ``first``) as its rows' top-k, as lists:
        ids [n][k], probabilities [n][k]; kept until ``commit`` tells which rows are committed."""
        if self.wants_rows:
            self.pending.append((first, list(tokens), parents, id_rows, prob_rows))

    def commit(self, committed: list[int]) -> None:
        """Keep the rows of committed tokens from the pending forwards; advance every replay."""
        for first, tokens, parents, id_rows, prob_rows in self.pending:
            for node, position in _committed_nodes(first, tokens, parents, committed):
                self.rows[position] = (id_rows[node], prob_rows[node])
        self.pending = []
        for score in self.scores.values():
            score.advance(committed)

    @property
    def chain_rounds(self) -> int:
        """Chain rounds scored so far in this request, over all drafters: alpha's posterior can only
        have moved when this changed."""
        return sum(sum(score.hist) for score in self.scores.values()) + self.model_rounds

    def observe_chain(self, drafter: str, drafted: int, accepted: int) -> None:
        """A model drafter's sequence round: ``accepted`` of ``drafted`` tokens (censored when all)."""
        if drafted < 1 or drafted > self.gamma:
            return
        self.model_rounds += 1
        hist = self.model_hist.setdefault(drafter, [0] * (self.gamma + 1))
        censored = self.model_censored.setdefault(drafter, [0] * self.gamma)
        if accepted < drafted:
            hist[accepted] += 1
        elif drafted == self.gamma:
            hist[self.gamma] += 1
        else:
            censored[drafted] += 1

    def counts(self, drafter: str) -> LiveCounts:
        if drafter in self.scores:
            return self.scores[drafter].counts()
        return LiveCounts(tuple(self.model_hist.get(drafter, ())), tuple(self.model_censored.get(drafter, ())))


def _committed_nodes(first: int, tokens: list[int], parents: tuple[int, ...] | None,
                     committed: list[int]) -> list[tuple[int, int]]:
    """(node, position) of the forward's nodes on the committed path: the chain's nodes while they
    match, or the tree's path from node 0 (its root) down the children that were committed."""
    if parents is None:
        result = []
        for node, token in enumerate(tokens):
            position = first + node
            if position >= len(committed) or committed[position] != token:
                break
            result.append((node, position))
        return result
    result, node, position = [], 0, first
    while position < len(committed) and committed[position] == tokens[node]:
        result.append((node, position))
        position += 1
        if position >= len(committed):
            break
        node = next((child for child in range(node + 1, len(parents))
                     if parents[child] == node and tokens[child] == committed[position]), -1)
        if node < 0:
            break
    return result
