"""Prune-then-graft (Graft, arXiv 2605.20104): a model tree with retrieved branches, budget fixed.

The model drafter grows its tree to the stage's shape. A retrieval drafter (``ngram:N``,
``recycle``, ``cache``) proposes its own small tree of at most ``graft_budget`` nodes from
the same root. The retrieved tree is merged into the model tree from the root down: a
retrieved token that equals a model child there is the same node (de-duplicated, and the
model node is then protected from pruning); any other retrieved token becomes an extra,
deterministic child, ranked after the model's children (docs/planner-math.md section 3: the
extended rank vector [p_1..p_B, r_1..r_R]). To keep the node budget fixed, the model tree
is pruned by confidence: the lowest-scored removable model leaf goes first, where a leaf is
removable if it is its parent's last remaining child (so the kept children of a node stay a
prefix of its ranked, or drawn, children, as lossless sampling requires). When the model
tree cannot give up enough nodes, the last retrieved nodes are dropped instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specplan.core.plan import StageShape
from specplan.core.errors import TreeError
from specplan.runtime.drafters.base import Drafter, SamplingConfig
from specplan.runtime.drafters.tree_growth import Growth
from specplan.runtime.tree import DraftTree


def _merge(growth: Growth, kept: set[int], retrieved: DraftTree) -> tuple[set[int], list[tuple[bool, int, int]]]:
    """Match the retrieved tree into the model tree from the root.

    Returns the protected model nodes and the extra nodes, each ``(parent_is_model,
    parent, token)`` with ``parent`` a model node or an index into the extras, parents first.
    """
    placed: dict[int, tuple[bool, int]] = {0: (True, 0)}  # retrieved node -> (is model node, index)
    protected = {0}
    extras: list[tuple[bool, int, int]] = []
    for node in range(1, retrieved.num_nodes):
        is_model, parent = placed[retrieved.parents[node]]
        token = retrieved.token_list[node]
        if is_model:
            match = next((c for c in growth.children[parent] if c in kept and growth.tokens[c] == token), None)
            if match is not None:
                placed[node] = (True, match)
                protected.add(match)
                continue
        placed[node] = (False, len(extras))
        extras.append((is_model, parent, token))
    return protected, extras


def _prune(growth: Growth, kept: set[int], protected: set[int], count: int) -> int:
    """Remove up to ``count`` lowest-scored removable model leaves from ``kept``; return how many."""
    removed = 0
    while removed < count:
        removable = [
            node for node in kept
            if node not in protected
            and not any(child in kept for child in growth.children[node])
            and [c for c in growth.children[growth.parents[node]] if c in kept][-1] == node
        ]
        if not removable:
            break
        kept.remove(min(removable, key=lambda node: (growth.scores[node], -node)))
        removed += 1
    return removed


def graft(growth: Growth, retrieved: DraftTree, size: int) -> DraftTree:
    """The model tree ``growth`` (its selected nodes) with ``retrieved`` grafted in, at most ``size`` nodes.

    Example
    -------
    >>> growth = Growth(9)
    >>> a, b = growth.add(0, 1, 0.6), growth.add(0, 2, 0.3)
    >>> c = growth.add(a, 3, 0.5)
    >>> retrieved = DraftTree((-1, 0, 1, 0), torch.tensor([9, 1, 4, 7]))
    >>> tree = graft(growth, retrieved, size=4)
    >>> tree.parents, tree.token_list
    ((-1, 0, 1, 0), (9, 1, 4, 7))
    """
    if retrieved.token_list[0] != growth.tokens[0]:
        raise TreeError("the retrieved tree and the model tree must share the root (the last committed token)")
    kept = set(growth.selected if growth.selected is not None else range(growth.num_nodes))
    protected, extras = _merge(growth, kept, retrieved)
    free = size - len(kept)
    if len(extras) > free:
        free += _prune(growth, kept, protected, len(extras) - free)
        extras = extras[: max(0, free)]
    out = Growth(growth.tokens[0])
    index = {0: 0}
    for node in sorted(kept)[1:]:
        index[node] = out.add(index[growth.parents[node]], growth.tokens[node], sampled=growth.sampled[node])
    out.rows = {index[node]: row for node, row in growth.rows.items() if node in index}
    extra_index: list[int] = []
    for is_model, parent, token in extras:
        extra_index.append(out.add(index[parent] if is_model else extra_index[parent], token))
    return out.draft_tree()


class GraftDrafter(Drafter):
    """A model tree drafter with ``graft_budget`` of its nodes given to a retrieval drafter."""

    def __init__(self, model, retrieval, graft_budget: int):
        if graft_budget < 1:
            raise TreeError(f"graft_budget must be >= 1 (got {graft_budget}); use a plain tree stage for no graft")
        self.model = model  # a ModelTreeDrafter (anything with grow())
        self.retrieval = retrieval  # a RetrievalTreeDrafter
        self.graft_budget = graft_budget
        self.name = f"{model.name}+{retrieval.name}"

    def reset(self) -> None:
        self.model.reset()
        self.retrieval.reset()

    @property
    def learns_from_verifier(self) -> bool:  # type: ignore[override]
        return self.model.learns_from_verifier or self.retrieval.learns_from_verifier

    @property
    def reads_verifier_cache(self) -> bool:  # type: ignore[override]
        return self.model.reads_verifier_cache

    def attach_verifier(self, verifier) -> None:
        """Pass the verifier's session on to a model drafter that reads its features (a draft head)."""
        self.model.attach_verifier(verifier)

    def observe(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        self.retrieval.observe(tokens, logits)
        self.model.observe(tokens, logits)

    def sessions(self) -> list:
        return self.model.sessions()

    def drafters(self) -> list[Drafter]:
        return [self, *self.model.drafters(), *self.retrieval.drafters()]

    def propose_tree(self, committed: list[int], shape: StageShape, sampling: SamplingConfig,
                     generator: torch.Generator) -> DraftTree:
        """The model tree of ``shape`` with up to ``graft_budget`` nodes (fewer in a smaller, capped
        shape: at most all but the root) given to retrieved tokens."""
        growth = self.model.grow(committed, shape, sampling, generator)
        budget = min(self.graft_budget, shape.size - 1)
        if budget < 1:
            return growth.draft_tree()
        retrieval_shape = StageShape("tree", budget=budget + 1, depth=shape.max_depth, dynamic=True)
        retrieved = self.retrieval.propose_tree(committed, retrieval_shape, sampling, generator)
        return graft(growth, retrieved, shape.size)
