"""One stage of a plan: a drafter proposes, a verifier model checks the draft in one forward.

A stage round (Leviathan et al., arXiv 2211.17192, for a sequence; SpecInfer, arXiv
2305.09781, and Sequoia, arXiv 2402.12374, for a tree) keeps the verifier's invariant: its
cache holds every committed token but the last (the *root* of the next draft). The drafter
proposes up to gamma tokens (or a tree) continuing the committed text; the verifier runs one
forward over [root, draft...]; greedy or lossless rejection-sampling verification accepts a
path and yields the bonus token; the cache keeps the root and the accepted path.

The same round serves the target (the top stage) and a middle model of a hierarchy (HSD,
arXiv 2510.19705; SpecMQuant, arXiv 2505.22179): a middle model's committed tokens are the
draft of the stage above, and, when sampling, the rows of its distribution at the committed
positions are that draft's ``draft_probs`` (lossless drafting makes its output distributed
as its own autoregressive samples).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specplan.core.plan import StageShape
from specplan.runtime.drafters.base import Drafter, Proposal, SamplingConfig
from specplan.runtime.sampling import target_probabilities
from specplan.runtime.session import ModelSession
from specplan.runtime.timing import now
from specplan.runtime.tree import DraftTree
from specplan.runtime.verify import (VerifyResult, accept_greedy_chain, accept_greedy_tree, verify_greedy,
                                     verify_greedy_chain, verify_sampling)

FOLD_LIMIT = 8  # most catch-up tokens folded into a verify forward; more (a prefill) run alone


@dataclass(frozen=True)
class RoundResult:
    """What one stage round commits.

    ``verifier_probs`` row i is the verifier's sampling distribution that ``chunk[i]`` follows
    (set only when the caller asked for it, at temperature > 0).
    """

    chunk: list[int]  # committed token ids, bonus included
    draft_seconds: float
    verify_seconds: float
    verifier_probs: torch.Tensor | None = None  # [len(chunk), vocab] float32
    drafted: int = 0  # draft tokens (chain tokens or tree nodes) the round's verifier checked, the root not counted


@dataclass
class StageStats:
    """Running totals of one stage: its verifier's forwards and what they committed."""

    drafter: str
    verifier: str
    verify_forwards: int = 0
    committed: int = 0  # tokens committed by the verifier's rounds, bonus included
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    drafted: int = 0  # draft tokens the rounds put before the verifier (RoundResult.drafted)

    def add(self, result: RoundResult) -> None:
        self.verify_forwards += 1
        self.drafted += result.drafted
        self.committed += len(result.chunk)
        self.draft_seconds += result.draft_seconds
        self.verify_seconds += result.verify_seconds

    @property
    def accepted(self) -> int:
        """Draft tokens accepted (the bonus tokens excluded)."""
        return self.committed - self.verify_forwards

    @property
    def mean_accepted(self) -> float:
        """Committed tokens per verify forward, bonus included (Spec-Bench's definition)."""
        return self.committed / max(1, self.verify_forwards)

    def as_record(self) -> dict:
        return {"drafter": self.drafter, "verifier": self.verifier, "accepted": self.accepted,
                "verify_forwards": self.verify_forwards, "mean_accepted": round(self.mean_accepted, 4),
                "draft_seconds": round(self.draft_seconds, 4), "verify_seconds": round(self.verify_seconds, 4)}


class StageRunner:
    """Drives one stage: ``drafter`` (sequence, with ``gamma``; or tree, with ``tree``) -> ``verifier``.

    ``drafter`` None (or gamma 0 without a tree) means the verifier decodes alone: a round
    commits one token.
    """

    def __init__(self, verifier: ModelSession, drafter: Drafter | Drafter | None = None, gamma: int = 0,
                 tree: StageShape | None = None, names: tuple[str, str] = ("none", "target")):
        self.verifier = verifier
        self.drafter = drafter
        self.gamma = gamma if drafter is not None else 0
        self.tree = tree if drafter is not None else None
        self.names = names
        self.pending: list[int] = []  # catch-up tokens folded into the next verify forward
        # called with every verifier forward: (tokens [n], logits [n, vocab], parents [n] or None for a
        # chain); an adaptive plan's live acceptance reads the target's rows here (runtime/live_acceptance.py)
        self.listeners: list[Callable[[list[int], torch.Tensor, tuple[int, ...] | None], None]] = []
        if drafter is not None:  # a draft head reads the verifier's hidden states
            drafter.attach_verifier(verifier)

    def reset(self, keep_cache: bool = False) -> None:
        """Start a new request: the drafter's state is cleared, and the verifier's cache too unless
        ``keep_cache`` (the next :meth:`catch_up` then trims it to the prefix the new text shares)."""
        if not keep_cache:
            self.verifier.reset()
        self.pending = []
        if self.drafter is not None:
            self.drafter.reset()

    @property
    def can_fold(self) -> bool:
        """Whether a catch-up may wait for the next verify forward: the drafter neither reads
        the verifier's cache (a draft head) nor learns from its forwards (Token Recycling),
        so nothing looks at the verifier between the catch-up and that forward."""
        drafter = self.drafter
        return drafter is None or not (drafter.reads_verifier_cache or drafter.learns_from_verifier)

    @property
    def rows_watched(self) -> bool:
        """Whether anything reads the verifier's logits rows besides the verify: a listener, or a
        drafter that learns from them (:meth:`observe`)."""
        return bool(self.listeners) or (self.drafter is not None and self.drafter.learns_from_verifier)

    def new_stats(self) -> StageStats:
        return StageStats(*self.names)

    def observe(self, tokens: list[int], logits: torch.Tensor, parents: tuple[int, ...] | None = None) -> None:
        """Show a verifier forward (tokens [n], logits [n, vocab]; ``parents`` [n] of a tree, None for
        a chain) to a drafter that learns from it and to the listeners."""
        if not tokens:
            return
        if self.drafter is not None:
            self.drafter.observe(tokens, logits)
        for listener in self.listeners:
            listener(tokens, logits, parents)

    def catch_up(self, committed: list[int], fold: bool = False) -> None:
        """Bring the verifier's cache to ``committed[:-1]``: rewind, then one forward over what it lacks.

        With ``fold`` (a hierarchy's middle model, :class:`HierarchyDrafter`) and at most
        ``FOLD_LIMIT`` tokens missing, the forward is not run now: the tokens go in front of the
        next round's verify forward, one forward of m + n tokens instead of T(m) + T(n). After
        the stage above accepts a middle model's whole draft, the middle lacks its last draft
        token: folding saves a T_middle(1) forward per such round (docs/planner-math.md
        section 4.5). A prompt's prefill stays its own forward.
        """
        missing = self.verifier.rewind_to(committed)[:-1]
        if not missing:
            return
        if fold and self.can_fold and len(missing) <= FOLD_LIMIT:
            self.pending = missing
            return
        if self.rows_watched:
            self.observe(missing, self.verifier.extend(missing))
        else:
            self.verifier.advance(missing)  # no reader of the rows: llama.cpp computes none (docs/backends.md)

    def _verify_forward(self, tokens: list[int], tree: DraftTree | None,
                        best_only: bool = False) -> tuple[torch.Tensor | list[int], int]:
        """The verifier's forward over the folded catch-up tokens (if any) then ``tokens`` (a
        chain, or ``tree``'s nodes): logits [len(tokens), vocab], or with ``best_only`` (nothing
        but a greedy verify reads the rows: not :attr:`rows_watched`) only each row's argmax,
        which the backend takes where the rows lie instead of copying them out
        (``Session.extend_best_tokens``); and how many tokens were folded in front
        (:meth:`_keep` takes it)."""
        prefix, self.pending = self.pending, []
        shape = tree.after_chain(prefix) if tree is not None and prefix else tree
        fed = [*prefix, *tokens]
        if best_only:
            rows = self.verifier.extend_best_tokens(fed, tree=shape)
        else:
            rows = self.verifier.extend(fed, tree=shape)  # [len(prefix) + n, vocab]
            self.observe(fed, rows, shape.parents if shape is not None else None)
        return (rows[len(prefix):] if prefix else rows), len(prefix)

    def _keep(self, past: int, folded: int, nodes) -> None:
        """Keep the ``folded`` catch-up tokens and the tree's ``nodes`` of the last verify forward."""
        self.verifier.keep(past, [*range(folded), *(folded + node for node in nodes)] if folded else nodes)

    def play(self, committed: list[int], remaining: int, sampling: SamplingConfig, generator: torch.Generator,
             want_probs: bool = False) -> RoundResult:
        """One round continuing ``committed`` (the verifier caught up to ``committed[:-1]``).

        The draft is capped so that no accepted path commits more than ``remaining`` tokens;
        with ``want_probs`` (and sampling) the result carries the verifier's rows for the chunk.
        """
        if self.tree is not None:
            return self._tree_round(committed, remaining, sampling, generator, want_probs)
        return self._sequence_round(committed, remaining, sampling, generator, want_probs)

    def _tree_round(self, committed, remaining, sampling, generator, want_probs) -> RoundResult:
        draft_start = now(self.verifier.device)
        shape = self.tree.capped(remaining - 1)
        if shape is None:
            tree = DraftTree((-1,), torch.tensor([committed[-1]]))
        else:
            tree = self.drafter.propose_tree(committed, shape, sampling, generator)
        verify_start = now(self.verifier.device)
        past = len(self.verifier.cached)
        shape = tree if tree.num_nodes > 1 else None
        if sampling.greedy and not self.rows_watched:
            best, folded = self._verify_forward(list(tree.token_list), shape, best_only=True)
            result, probs = accept_greedy_tree(tree, best), None
        else:
            logits, folded = self._verify_forward(list(tree.token_list), shape)
            result, probs = _verify(tree, logits, sampling, generator)  # logits [nodes, vocab]
        self._keep(past, folded, result.kept_nodes)
        rows = probs[list(result.kept_nodes)] if want_probs and probs is not None else None
        return RoundResult(result.committed_tokens(tree), verify_start - draft_start,
                           now(self.verifier.device) - verify_start, rows, tree.num_nodes - 1)

    def _sequence_round(self, committed, remaining, sampling, generator, want_probs) -> RoundResult:
        budget = min(self.gamma, remaining - 1)
        draft_start = now(self.verifier.device)
        proposal = Proposal(())
        if self.drafter is not None and budget > 0:
            proposal = self.drafter.propose(committed, budget, sampling, generator)
        verify_start = now(self.verifier.device)
        past = len(self.verifier.cached)
        tokens = [committed[-1], *proposal.tokens]
        if sampling.greedy and not self.rows_watched:
            best, folded = self._verify_forward(tokens, None, best_only=True)
            result, probs = accept_greedy_chain(tokens, best), None
        else:
            logits, folded = self._verify_forward(tokens, None)  # logits [1 + gamma, vocab]
            if sampling.greedy:
                result, probs = verify_greedy_chain(tokens, logits), None
            else:
                result, probs = _verify(_chain_tree(tokens, proposal, logits.shape[-1]), logits, sampling, generator)
        self._keep(past, folded, result.kept_nodes)
        chunk = [tokens[node] for node in result.accepted_nodes] + [result.next_token]
        rows = probs[list(result.kept_nodes)] if want_probs and probs is not None else None
        return RoundResult(chunk, verify_start - draft_start, now(self.verifier.device) - verify_start, rows,
                           len(proposal.tokens))


def _chain_tree(tokens: list[int], proposal: Proposal, vocab: int) -> DraftTree:
    """The chain [root, draft...] as a tree; rows of ``draft_probs`` where the draft was sampled."""
    if proposal.draft_probs is None:
        return DraftTree.chain(torch.tensor(tokens))
    rows = torch.zeros(len(tokens), vocab)  # row i: the distribution node i's child was drawn from
    width = min(vocab, proposal.draft_probs.shape[-1])
    rows[: len(proposal.tokens), :width] = proposal.draft_probs[:, :width]
    return DraftTree.chain(torch.tensor(tokens), draft_probs=rows, sampled=tuple([False] + [True] * len(proposal.tokens)))


def _verify(tree: DraftTree, logits: torch.Tensor, sampling: SamplingConfig,
            generator: torch.Generator) -> tuple[VerifyResult, torch.Tensor | None]:
    """Greedy or rejection-sampling verification; the target rows [nodes, vocab] when sampling."""
    if sampling.greedy:
        return verify_greedy(tree, logits), None
    probs = target_probabilities(logits, sampling.temperature, sampling.top_p).cpu()  # [nodes, vocab]
    return verify_sampling(tree, probs, generator), probs
