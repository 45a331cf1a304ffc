"""DraftTree: one token tree as a parent array, and what the verifier needs from it.

A tree of ``n`` nodes is the tuple ``parents`` with ``parents[0] = -1`` and
``0 <= parents[i] < i`` for ``i >= 1`` (so every node comes after its parent and there is
no cycle). Node 0 is the root: the last committed token, not yet fed to the verifier. A
sequence draft of length gamma is the chain ``parents = (-1, 0, 1, ..., gamma - 1)``.

Tree attention (EAGLE, arXiv 2401.15077, eagle/model/utils.py; SpecInfer, arXiv
2305.09781): node ``i`` attends to the whole cache and to its ancestors and itself. The
ancestor mask follows the recurrence ``row(i) = row(parents[i]) | {i}``, and the position
of node ``i`` is the committed length plus its depth (``row sum - 1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import torch

from specplan.core.errors import TreeError
from specplan.core.parents import check_parents, node_depths


@dataclass(frozen=True, eq=False)
class DraftTree:
    """A draft token tree: parent array, tokens, and how each proposal was made.

    ``draft_probs[i]`` is the draft distribution node ``i``'s *sampled* children were drawn
    from, without replacement, in child order; ``sampled[i]`` says whether node ``i`` was
    drawn from its parent's row (True) or proposed deterministically (False: top-k,
    retrieved, grafted; the verifier then treats its draft distribution as a point mass).
    ``sampled[0]`` (the root) is ignored. ``None`` means every proposal is deterministic.
    """

    parents: tuple[int, ...]  # [num_nodes], parents[0] = -1, parents[i] < i
    tokens: torch.Tensor  # [num_nodes] long; tokens[0] = the last committed token
    draft_probs: torch.Tensor | None = None  # [num_nodes, vocab] float
    sampled: tuple[bool, ...] | None = None  # [num_nodes]

    def __post_init__(self) -> None:
        parents = check_parents(self.parents)
        object.__setattr__(self, "parents", parents)
        tokens = torch.as_tensor(self.tokens)
        if tokens.dim() != 1 or tokens.numel() != len(parents) or tokens.is_floating_point():
            raise TreeError(
                f"tokens must be {len(parents)} integer ids (one per node), got shape {tuple(tokens.shape)} {tokens.dtype}"
            )
        object.__setattr__(self, "tokens", tokens.long())
        if self.sampled is not None:
            sampled = tuple(bool(flag) for flag in self.sampled)
            if len(sampled) != len(parents):
                raise TreeError(f"sampled must have one flag per node ({len(parents)}), got {len(sampled)}")
            object.__setattr__(self, "sampled", sampled)
            if any(sampled[1:]) and self.draft_probs is None:
                raise TreeError(
                    "some nodes are marked sampled but draft_probs is None; pass the draft distributions they were drawn from"
                )
        probs = self.draft_probs
        if probs is not None and (probs.dim() != 2 or probs.shape[0] != len(parents)):
            raise TreeError(f"draft_probs must be [num_nodes={len(parents)}, vocab], got {tuple(probs.shape)}")

    # ---- constructors and converters -------------------------------------------------

    @classmethod
    def chain(cls, tokens, draft_probs: torch.Tensor | None = None,
              sampled: Sequence[bool] | None = None) -> "DraftTree":
        """A sequence draft: ``tokens[0]`` the root, then each token the child of the one before."""
        tokens = torch.as_tensor(tokens)
        parents = (-1, *range(tokens.numel() - 1)) if tokens.numel() else ()
        return cls(parents, tokens, draft_probs, None if sampled is None else tuple(sampled))

    def after_chain(self, prefix: Sequence[int]) -> "DraftTree":
        """This tree behind the chain ``prefix``: node i of the chain is the parent of node i + 1,
        the last chain token the parent of this tree's root. Only its mask and positions are
        used (a verify forward with folded catch-up tokens), so no draft distributions."""
        offset = len(prefix)
        parents = (*range(-1, offset - 1), offset - 1, *(parent + offset for parent in self.parents[1:]))
        return DraftTree(parents, torch.cat([torch.as_tensor(prefix, dtype=torch.long), self.tokens.cpu()]))

    # ---- structure ---------------------------------------------------------------------

    @property
    def num_nodes(self) -> int:
        return len(self.parents)

    @cached_property
    def depth(self) -> tuple[int, ...]:
        """Depth of every node (root 0)."""
        return tuple(node_depths(self.parents))

    @cached_property
    def _children(self) -> tuple[tuple[int, ...], ...]:
        children: list[list[int]] = [[] for _ in self.parents]
        for node in range(1, self.num_nodes):
            children[self.parents[node]].append(node)
        return tuple(tuple(kids) for kids in children)

    def children(self, node: int) -> tuple[int, ...]:
        """Children of ``node`` in order (their sibling ranks are 0, 1, ...)."""
        return self._children[node]

    @cached_property
    def ranks(self) -> tuple[int, ...]:
        """Sibling rank of every node (root 0): the k of the p_k acceptance statistics."""
        ranks = [0] * self.num_nodes
        for kids in self._children:
            for rank, kid in enumerate(kids):
                ranks[kid] = rank
        return tuple(ranks)

    @cached_property
    def token_list(self) -> tuple[int, ...]:
        """``tokens`` as Python ints (one device sync, cached)."""
        return tuple(self.tokens.tolist())

    def is_sampled(self, node: int) -> bool:
        """Whether ``node`` was drawn from its parent's draft distribution."""
        return self.sampled is not None and node > 0 and self.sampled[node]

    def path_to(self, node: int) -> tuple[int, ...]:
        """Nodes from the root to ``node``, inclusive."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return tuple(reversed(path))

    def paths(self) -> tuple[tuple[int, ...], ...]:
        """Every root-to-leaf path, leaves in node order."""
        return tuple(self.path_to(node) for node in range(self.num_nodes) if not self._children[node])

    @cached_property
    def _ancestors(self) -> torch.Tensor:
        mask = torch.eye(self.num_nodes, dtype=torch.bool)
        for node in range(1, self.num_nodes):
            mask[node] |= mask[self.parents[node]]
        return mask

    def ancestor_mask(self) -> torch.Tensor:
        """Bool [num_nodes, num_nodes]: ``[i, j]`` is True iff j is i or an ancestor of i.

        Each row is its parent's row plus the node itself (EAGLE's recurrence), so the
        row sum minus one is the node's depth.

        Example
        -------
        >>> DraftTree((-1, 0, 0, 1), torch.tensor([5, 6, 7, 8])).ancestor_mask().int().tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
        """
        return self._ancestors.clone()

    # ---- what the verifier forward needs ---------------------------------------------

    def attention_mask(self, past_length: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """Additive float mask [1, 1, num_nodes, past_length + num_nodes]: 0 where attended, finfo.min elsewhere.

        transformers 5.x passes a 4-D mask through unchanged to eager and sdpa attention
        (a bool mask is silently wrong under eager: measured with transformers 5.x, the float mask is
        right under eager and sdpa; tests/runtime/test_tree_forward.py checks it).
        """
        n = self.num_nodes
        mask = torch.zeros((n, past_length + n), dtype=dtype, device=device)
        blocked = ~self._ancestors.to(device)
        mask[:, past_length:].masked_fill_(blocked, torch.finfo(dtype).min)
        return mask.view(1, 1, n, past_length + n)

    @cached_property
    def _depth_tensor(self) -> torch.Tensor:
        return torch.tensor(self.depth, dtype=torch.long)

    def position_ids(self, past_length: int, device: torch.device | str) -> torch.Tensor:
        """Long [1, num_nodes]: ``past_length + depth``."""
        return (self._depth_tensor.to(device) + past_length).unsqueeze(0)
