"""A sequence stage over ``b`` prompts at once: lockstep rounds, each sequence its own accepted
length, KV rows and rollback (docs/guide.md, "Batched runs"; planner-math.md section 11.2).

Each round every running sequence drafts up to ``gamma`` tokens (its own count: a retrieval
drafter may find fewer), the target runs one forward over ``[b, 1 + gamma]`` rows (the last
committed token, the *root*, then the draft; short rows padded and masked), and greedy
verification accepts, per sequence, the longest draft prefix equal to the target's argmax,
then the bonus token (Leviathan et al., arXiv 2211.17192). Each sequence keeps the cache rows of
its root and accepted tokens (:meth:`BatchedKV.keep`); a sequence that reaches EOS or its token
budget leaves the batch, so finished sequences cost nothing. Without a drafter (``gamma`` 0)
this is plain batched greedy decoding.

Lossless per sequence: a sequence's rows attend only to its own kept tokens at its own
positions, so its logits are the ones it would get alone (up to float summation order) and its
greedy output is the target's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specplan.runtime.batched.cache import COMPACT_HOLES, BatchedKV
from specplan.runtime.commit import Committed
from specplan.runtime.drafters.base import BatchedDrafter
from specplan.runtime.tree import DraftTree
from specplan.runtime.verify import verify_greedy
from specplan.runtime.timing import now


@dataclass(frozen=True)
class BatchedSequence:
    """One prompt's output: its new tokens (EOS included when it stopped there)."""

    token_ids: tuple[int, ...]
    committed_per_forward: tuple[int, ...]  # per target forward it took part in (prefill excluded)
    stop_reason: str  # eos | max_new_tokens

    @property
    def mean_accepted(self) -> float:
        """Tokens per verify forward, bonus included (0 when the prefill's token ended it)."""
        return sum(self.committed_per_forward) / len(self.committed_per_forward) if self.committed_per_forward else 0.0


@dataclass(frozen=True)
class BatchedResult:
    sequences: tuple[BatchedSequence, ...]  # in prompt order
    seconds: float  # wall time of the whole batch, prefill included
    rounds: int  # target verify forwards (prefill excluded)
    draft_seconds: float
    verify_seconds: float
    verify_widths: tuple[int, ...] = ()  # tokens per sequence of each verify forward (root + longest draft)
    prefill_seconds: float = 0.0  # the prompts' forward, inside ``seconds`` (it commits each sequence's first token)

    @property
    def new_tokens(self) -> int:
        return sum(len(sequence.token_ids) for sequence in self.sequences)

    @property
    def tokens_per_s(self) -> float:
        """Tokens committed per second by the whole batch (goodput)."""
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        """Goodput of the decode alone: the tokens committed after the prefill's first token per
        second after the prefill (what the schedule predicts, planner-math.md section 11.2)."""
        return decode_rate(self.new_tokens, len(self.sequences), self.seconds, self.prefill_seconds)


def decode_rate(new_tokens: int, sequences: int, seconds: float, prefill_seconds: float) -> float:
    """Tokens per second of the decode phase: every sequence's first new token is the prefill's.

    >>> decode_rate(40, 4, 2.5, 0.5)
    18.0
    """
    decode_seconds = seconds - prefill_seconds
    return max(new_tokens - sequences, 0) / decode_seconds if decode_seconds > 0 else 0.0


class BatchedEngine:
    """Greedy batched decoding of ``target``; ``drafter`` and ``gamma`` > 0 make it a sequence stage."""

    def __init__(self, target: torch.nn.Module, device: torch.device, eos_ids: set[int],
                 drafter: BatchedDrafter | None = None,
                 gamma: int = 0, pad_id: int = 0, name: str = "target", compact_holes: float = COMPACT_HOLES):
        if gamma < 0 or (gamma > 0 and drafter is None):
            raise ValueError(f"gamma {gamma} needs a drafter and must be >= 0")
        self.target = target
        self.device = device
        self.eos_ids = set(eos_ids)
        self.drafter = drafter if gamma > 0 else None
        self.gamma = gamma
        self.pad_id = pad_id
        self.name = name
        self.compact_holes = compact_holes

    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> BatchedResult:
        if not prompts or min(len(prompt) for prompt in prompts) < 1 or max_new_tokens < 1:
            raise ValueError("a batch needs at least one non-empty prompt and max_new_tokens >= 1")
        sequences = [Committed(prompt, max_new_tokens, self.eos_ids) for prompt in prompts]
        kv = BatchedKV(self.target, self.device, self.pad_id, self.compact_holes)
        if self.drafter is not None:
            self.drafter.reset(len(prompts))
        start = now(self.device)
        logits = kv.forward(prompts)  # prefill: its argmax after the prompt is the first new token
        kv.keep([len(prompt) for prompt in prompts])
        for sequence, prompt, row in zip(sequences, prompts, logits):
            sequence.add([int(row[len(prompt) - 1].argmax())])
        self._after_prefill(prompts, logits)
        prefill_seconds = now(self.device) - start
        running = list(range(len(prompts)))
        draft_seconds = verify_seconds = 0.0
        rounds, widths = 0, []
        while True:
            running = self._drop_finished(sequences, running, kv)
            if not running:
                break
            draft_start = now(self.device)
            drafts = self._drafts([sequences[index] for index in running], max_new_tokens)
            verify_start = now(self.device)
            self._verify(kv, [sequences[index] for index in running], drafts, max_new_tokens)
            draft_seconds += verify_start - draft_start
            verify_seconds += now(self.device) - verify_start
            rounds += 1
            widths.append(kv.last_width)
        seconds = now(self.device) - start
        # per_forward[0] is the prefill's token: a sequence's verify forwards are the rest
        outputs = tuple(BatchedSequence(tuple(s.new), tuple(s.per_forward[1:]), s.stop_reason) for s in sequences)
        return BatchedResult(outputs, seconds, rounds, draft_seconds, verify_seconds, tuple(widths), prefill_seconds)

    def _after_prefill(self, prompts: list[list[int]], logits: torch.Tensor) -> None:
        """The prompts' forward, for a drafter that learns from the target's rows (none here)."""

    def _drafts(self, running: list[Committed], max_new_tokens: int) -> list[tuple[int, ...]]:
        """Each sequence's draft, capped so that its accepted path never passes its token budget."""
        budgets = [min(self.gamma, sequence.remaining - 1) for sequence in running]
        if self.drafter is None or max(budgets) < 1:
            return [() for _ in running]
        proposals = self.drafter.propose([sequence.context for sequence in running], budgets)
        return [tuple(draft[:budget]) for draft, budget in zip(proposals, budgets)]

    def _verify(self, kv: BatchedKV, running: list[Committed], drafts: list[tuple[int, ...]],
                max_new_tokens: int) -> None:
        """One target forward over every running sequence's root and draft; greedy verification."""
        rows = [[sequence.context[-1], *draft] for sequence, draft in zip(running, drafts)]
        logits = kv.forward(rows)  # [b, width, vocab]
        counts = []
        for index, (sequence, row) in enumerate(zip(running, rows)):
            chain = DraftTree.chain(torch.tensor(row))
            result = verify_greedy(chain, logits[index, : len(row)])
            counts.append(result.accepted_length)  # the root and the accepted draft tokens stay cached
            sequence.add(result.committed_tokens(chain))
        kv.keep(counts)

    def _drop_finished(self, sequences: list[Committed], running: list[int], kv: BatchedKV) -> list[int]:
        """The running sequences still unfinished; finished ones leave the cache (and the drafter)."""
        kept = [position for position, index in enumerate(running) if not sequences[index].stop_reason]
        if len(kept) < len(running) and kept:
            kv.select(kept)
            if self.drafter is not None:
                self.drafter.select(kept)
        return [running[position] for position in kept]
