"""A tree stage over ``b`` prompts at once: every running sequence drafts its own tree with its
own retrieval drafter, the target verifies all the trees in one forward, and each sequence keeps
its root and accepted path (docs/guide.md, "Batched runs"; planner-math.md section 11.2).

Per round, sequence ``i`` grows the stage's tree from its last committed token (the root): the
planner's static parent array filled with the drafter's ranked candidates, or a best-first tree
of the stage's budget and depth (Sequoia, arXiv 2402.12374; EAGLE-2, arXiv 2406.16858). A
lookup that finds no candidate leaves a smaller tree; a sequence near its token budget grows the
shape's nodes down to the depth it may still accept. The target runs one forward over ``[b, widest tree]`` rows, row
``i`` attending to sequence ``i``'s kept slots and its tree ancestors only, at positions
``length + depth`` (:meth:`BatchedKV.tree_mask`); greedy tree verification (the deepest node whose
path matches the target's argmax, then the bonus) decides each sequence's commit, and its cache
keeps the root and accepted path (:meth:`BatchedKV.keep_nodes`). A drafter that learns from the
verifier (Token Recycling, arXiv 2408.08696) sees its own sequence's rows of every target forward.

Lossless per sequence: each tree row's logits are the ones that tree's forward would give the
sequence alone (up to float summation order), so its greedy output is the target's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from specplan.core.plan import StageShape
from specplan.runtime.batched.engine import BatchedEngine
from specplan.runtime.commit import Committed
from specplan.runtime.batched.cache import COMPACT_HOLES, BatchedKV
from specplan.runtime.batched.drafters import GREEDY, PerSequenceDrafters
from specplan.runtime.drafters.retrieval_tree import RetrievalTreeDrafter
from specplan.runtime.tree import DraftTree
from specplan.runtime.verify import verify_greedy


class PerSequenceTreeDrafters(PerSequenceDrafters):
    """A fresh retrieval tree drafter per sequence (``factory()``), each growing ``shape`` over its own text."""

    def __init__(self, factory: Callable[[], RetrievalTreeDrafter], shape: StageShape):
        super().__init__(factory)
        self.shape = shape

    def propose_trees(self, committed: Sequence[list[int]], depths: Sequence[int]) -> list[DraftTree]:
        """Sequence ``i``'s tree, its nodes at most ``depths[i]`` deep (0: the root alone)."""
        trees = []
        for drafter, text, depth in zip(self.drafters, committed, depths):
            shape = self.shape.capped(depth)  # the shape's own nodes down to that depth
            trees.append(DraftTree((-1,), torch.tensor([text[-1]])) if shape is None
                         else drafter.propose_tree(text, shape, GREEDY, self.generator))
        return trees

    def observe(self, index: int, tokens: Sequence[int], logits: torch.Tensor) -> None:
        """Sequence ``index``'s rows of a target forward (tokens [n], logits [n, vocab])."""
        drafter = self.drafters[index]
        if drafter.learns_from_verifier:
            drafter.observe(list(tokens), logits)


class BatchedTreeEngine(BatchedEngine):
    """Greedy batched decoding of ``target`` with a tree stage: ``drafter`` grows each sequence's
    tree of depth at most ``depth``."""

    def __init__(self, target: torch.nn.Module, device: torch.device, eos_ids: set[int],
                 drafter: PerSequenceTreeDrafters, depth: int, pad_id: int = 0, name: str = "target",
                 compact_holes: float = COMPACT_HOLES):
        super().__init__(target, device, eos_ids, drafter, depth, pad_id, name, compact_holes)

    def _after_prefill(self, prompts: list[list[int]], logits: torch.Tensor) -> None:
        for index, prompt in enumerate(prompts):
            self.drafter.observe(index, prompt, logits[index, : len(prompt)])

    def _drafts(self, running: list[Committed], max_new_tokens: int) -> list[DraftTree]:
        depths = [min(self.gamma, sequence.remaining - 1) for sequence in running]
        return self.drafter.propose_trees([sequence.context for sequence in running], depths)

    def _verify(self, kv: BatchedKV, running: list[Committed], trees: list[DraftTree],
                max_new_tokens: int) -> None:
        """One target forward over every running sequence's tree; greedy tree verification."""
        rows = [tree.token_list for tree in trees]
        logits = kv.forward(rows, trees)  # [b, widest, vocab]
        kept = []
        for index, (sequence, tree) in enumerate(zip(running, trees)):
            own = logits[index, : tree.num_nodes]
            self.drafter.observe(index, rows[index], own)
            result = verify_greedy(tree, own)
            kept.append(result.kept_nodes)
            sequence.add(result.committed_tokens(tree))
        kv.keep_nodes(kept)
