"""The speculative decoding loop for one stage (drafter -> target), and plain decoding.

Invariant: the target's cache holds every committed token but the last (the *root* of the
next draft). Each round: the drafter proposes up to gamma tokens continuing the committed
text; the target runs one forward over [root, draft...]; verification (greedy, or lossless
rejection sampling) accepts a prefix and yields the bonus token; the cache keeps the root
and the accepted tokens. Leviathan et al., arXiv 2211.17192; Chen et al., arXiv 2302.01318.

A tree stage (SpecInfer, arXiv 2305.09781; Sequoia, arXiv 2402.12374; EAGLE-2, arXiv
2406.16858) is the same round with a draft tree: one target forward over every node with
the tree attention mask, greedy or multi-candidate rejection-sampling verification over the
tree, and the cache compacted to the root and the accepted path (``ModelSession.keep``).
Drafters that define ``observe(tokens, logits)`` (Token Recycling) see every target forward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from specplan.runtime.drafters.base import Drafter, Proposal, SamplingConfig, TreeDrafter, TreeShape
from specplan.runtime.sampling import target_probabilities
from specplan.runtime.session import ModelSession
from specplan.runtime.timing import now
from specplan.runtime.tree import DraftTree
from specplan.runtime.verify import VerifyResult, verify_greedy, verify_sampling


@dataclass(frozen=True)
class GenerationResult:
    token_ids: tuple[int, ...]  # [new_tokens] generated ids, EOS included when it stopped there
    seconds: float  # wall time, prefill included
    target_forwards: int  # verify forwards of the target (prefill excluded)
    committed_per_forward: tuple[int, ...]  # tokens committed by each target forward, bonus included
    draft_seconds: float
    verify_seconds: float
    stop_reason: str  # eos | max_new_tokens

    @property
    def mean_accepted(self) -> float:
        """Committed tokens per target forward, bonus included (Spec-Bench's definition)."""
        return sum(self.committed_per_forward) / max(1, len(self.committed_per_forward))

    @property
    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.seconds if self.seconds > 0 else 0.0


class SpeculativeEngine:
    """Runs plain decoding (no drafter), one sequence stage drafter -> target (``gamma``), or
    one tree stage (``tree``: a TreeShape, with a TreeDrafter)."""

    def __init__(self, target: torch.nn.Module, device: torch.device, eos_ids: set[int],
                 drafter: Drafter | TreeDrafter | None = None, gamma: int = 0, tree: TreeShape | None = None):
        self.target = ModelSession(target, device)
        self.device = device
        self.drafter = drafter
        self.gamma = gamma if drafter is not None else 0
        self.tree = tree if drafter is not None else None
        self.eos_ids = set(eos_ids)

    def _observe(self, tokens: list[int], logits: torch.Tensor) -> None:
        """Show a target forward (tokens [n], logits [n, vocab]) to a drafter that learns from it."""
        observe = getattr(self.drafter, "observe", None)
        if observe is not None and tokens:
            observe(tokens, logits)

    def _tree_round(self, committed: list[int], remaining: int, sampling: SamplingConfig,
                    generator: torch.Generator) -> tuple[list[int], float, float]:
        """Draft a tree (depth capped so no accepted path overshoots ``remaining`` new tokens),
        verify it with one target forward, keep the accepted path; return the committed chunk
        and the draft and verify seconds."""
        draft_start = now(self.device)
        shape = self.tree.capped(remaining - 1)
        if shape is None:
            tree = DraftTree((-1,), torch.tensor([committed[-1]]))
        else:
            tree = self.drafter.propose_tree(committed, shape, sampling, generator)
        verify_start = now(self.device)
        past = len(self.target.cached)
        logits = self.target.extend(tree.token_list, tree=tree if tree.num_nodes > 1 else None)  # [num_nodes, vocab]
        self._observe(list(tree.token_list), logits)
        if sampling.greedy:
            result = verify_greedy(tree, logits)
        else:
            result = verify_sampling(tree, target_probabilities(logits, sampling.temperature, sampling.top_p).cpu(), generator)
        self.target.keep(past, result.kept_nodes)
        return result.committed_tokens(tree), verify_start - draft_start, now(self.device) - verify_start

    def _verify(self, tokens: list[int], proposal: Proposal, logits: torch.Tensor,
                sampling: SamplingConfig, generator: torch.Generator) -> VerifyResult:
        """Accept a prefix of the chain [root, draft...] given target logits [len(tokens), vocab]."""
        draft_probs = None
        sampled = None
        if proposal.draft_probs is not None:
            vocab = logits.shape[-1]
            rows = torch.zeros(len(tokens), vocab)  # row i: distribution node i's child was drawn from
            rows[: len(proposal.tokens), : proposal.draft_probs.shape[-1]] = proposal.draft_probs
            draft_probs, sampled = rows, tuple([False] + [True] * len(proposal.tokens))
        tree = DraftTree.chain(torch.tensor(tokens), draft_probs=draft_probs, sampled=sampled)
        if sampling.greedy:
            return verify_greedy(tree, logits)
        probs = target_probabilities(logits, sampling.temperature, sampling.top_p)  # [n, vocab]
        return verify_sampling(tree, probs.cpu(), generator)

    def _sequence_round(self, committed: list[int], remaining: int, sampling: SamplingConfig,
                        generator: torch.Generator) -> tuple[list[int], float, float]:
        """Draft a chain of up to gamma tokens, verify it, keep the accepted prefix; return the
        committed chunk and the draft and verify seconds."""
        budget = min(self.gamma, remaining - 1)
        draft_start = now(self.device)
        proposal = Proposal(())
        if self.drafter is not None and budget > 0:
            proposal = self.drafter.propose(committed, budget, sampling, generator)
        verify_start = now(self.device)
        past = len(self.target.cached)
        tokens = [committed[-1], *proposal.tokens]
        logits = self.target.extend(tokens)  # [1 + gamma, vocab]
        self._observe(tokens, logits)
        result = self._verify(tokens, proposal, logits, sampling, generator)
        self.target.keep(past, [0, *result.accepted_nodes])
        chunk = [tokens[node] for node in result.accepted_nodes] + [result.next_token]
        return chunk, verify_start - draft_start, now(self.device) - verify_start

    def generate(self, prompt_ids: list[int], max_new_tokens: int, sampling: SamplingConfig,
                 on_commit: Callable[[list[int]], None] | None = None) -> GenerationResult:
        generator = torch.Generator().manual_seed(sampling.seed)
        self.target.reset()
        if self.drafter is not None:
            self.drafter.reset()
        committed = list(prompt_ids)
        new_tokens: list[int] = []
        per_forward: list[int] = []
        draft_seconds = verify_seconds = 0.0
        start = now(self.device)
        uncached = self.target.rewind_to(committed)
        if len(uncached) > 1:
            self._observe(uncached[:-1], self.target.extend(uncached[:-1]))  # prefill
        stop_reason = "max_new_tokens"
        while len(new_tokens) < max_new_tokens:
            play_round = self._tree_round if self.tree is not None else self._sequence_round
            chunk, drafting, verifying = play_round(committed, max_new_tokens - len(new_tokens), sampling, generator)
            draft_seconds += drafting
            verify_seconds += verifying
            chunk = chunk[: max_new_tokens - len(new_tokens)]
            for index, token in enumerate(chunk):
                if token in self.eos_ids:
                    chunk, stop_reason = chunk[: index + 1], "eos"
                    break
            per_forward.append(len(chunk))
            committed.extend(chunk)
            new_tokens.extend(chunk)
            if on_commit is not None:
                on_commit(chunk)
            if stop_reason == "eos":
                break
        seconds = now(self.device) - start
        return GenerationResult(tuple(new_tokens), seconds, len(per_forward), tuple(per_forward),
                                draft_seconds, verify_seconds, stop_reason)
