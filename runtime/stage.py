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

from dataclasses import dataclass

import torch

from specplan.runtime.drafters.base import Drafter, Proposal, SamplingConfig, TreeDrafter, TreeShape
from specplan.runtime.sampling import target_probabilities
from specplan.runtime.session import ModelSession
from specplan.runtime.timing import now
from specplan.runtime.tree import DraftTree
from specplan.runtime.verify import VerifyResult, verify_greedy, verify_sampling


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


@dataclass
class StageStats:
    """Running totals of one stage: its verifier's forwards and what they committed."""

    drafter: str
    verifier: str
    verify_forwards: int = 0
    committed: int = 0  # tokens committed by the verifier's rounds, bonus included
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0

    def add(self, result: RoundResult) -> None:
        self.verify_forwards += 1
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

    def __init__(self, verifier: ModelSession, drafter: Drafter | TreeDrafter | None = None, gamma: int = 0,
                 tree: TreeShape | None = None, names: tuple[str, str] = ("none", "target")):
        self.verifier = verifier
        self.drafter = drafter
        self.gamma = gamma if drafter is not None else 0
        self.tree = tree if drafter is not None else None
        self.names = names
        if drafter is not None:  # a draft head reads the verifier's hidden states
            drafter.attach_verifier(verifier)

    def reset(self) -> None:
        self.verifier.reset()
        if self.drafter is not None:
            self.drafter.reset()

    def new_stats(self) -> StageStats:
        return StageStats(*self.names)

    def observe(self, tokens: list[int], logits: torch.Tensor) -> None:
        """Show a verifier forward (tokens [n], logits [n, vocab]) to a drafter that learns from it."""
        if self.drafter is not None and tokens:
            self.drafter.observe(tokens, logits)

    def catch_up(self, committed: list[int]) -> None:
        """Bring the verifier's cache to ``committed[:-1]``: rewind, then one forward over what it lacks."""
        uncached = self.verifier.rewind_to(committed)
        if len(uncached) > 1:
            self.observe(uncached[:-1], self.verifier.extend(uncached[:-1]))

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
        logits = self.verifier.extend(tree.token_list, tree=tree if tree.num_nodes > 1 else None)  # [nodes, vocab]
        self.observe(list(tree.token_list), logits)
        result, probs = _verify(tree, logits, sampling, generator)
        self.verifier.keep(past, result.kept_nodes)
        rows = probs[list(result.kept_nodes)] if want_probs and probs is not None else None
        return RoundResult(result.committed_tokens(tree), verify_start - draft_start,
                           now(self.verifier.device) - verify_start, rows)

    def _sequence_round(self, committed, remaining, sampling, generator, want_probs) -> RoundResult:
        budget = min(self.gamma, remaining - 1)
        draft_start = now(self.verifier.device)
        proposal = Proposal(())
        if self.drafter is not None and budget > 0:
            proposal = self.drafter.propose(committed, budget, sampling, generator)
        verify_start = now(self.verifier.device)
        past = len(self.verifier.cached)
        tokens = [committed[-1], *proposal.tokens]
        logits = self.verifier.extend(tokens)  # [1 + gamma, vocab]
        self.observe(tokens, logits)
        result, probs = _verify(_chain_tree(tokens, proposal, logits.shape[-1]), logits, sampling, generator)
        self.verifier.keep(past, result.kept_nodes)
        chunk = [tokens[node] for node in result.accepted_nodes] + [result.next_token]
        rows = probs[list(result.kept_nodes)] if want_probs and probs is not None else None
        return RoundResult(chunk, verify_start - draft_start, now(self.verifier.device) - verify_start, rows)


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
