"""A neural tree drafter: a small model (or the target's first layers) grows a token tree.

One drafter forward per depth level: the nodes of that level are fed together, each
attending to the committed text and to its own ancestors among the draft nodes already in
the drafter's cache (the tree-attention mask of SpecInfer, arXiv 2305.09781, and EAGLE-2,
arXiv 2406.16858, over a cache that holds earlier levels). The shape is either the
planner's static DP tree (Sequoia, arXiv 2402.12374) or best-first under a node budget
(EAGLE-2; DySpec, arXiv 2410.11744); see :mod:`.tree_growth`.

Children of a node: greedy decoding takes the drafter's top-k tokens (deterministic
proposals; the heap key uses the drafter's softmax). Sampling draws k tokens *without
replacement* from the drafter's tempered / top-p distribution ``q`` and records ``q`` as the
node's draft row, so that multi-candidate rejection sampling stays lossless (Sequoia; RSD,
arXiv 2402.14160). After drafting, the drafter's cache is cut back to the committed text:
the next round feeds the accepted tokens and the bonus in one forward.
"""

from __future__ import annotations

import torch

from specplan.core.plan import StageShape
from specplan.runtime.drafters.base import Drafter, SamplingConfig
from specplan.runtime.drafters.tree_growth import Children, Growth, grow_best_first, grow_static
from specplan.runtime.sampling import target_probabilities
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.runtime.session import ModelSession
from specplan.runtime.tree import DraftTree


def draw_without_replacement(probs: torch.Tensor, count: int, generator: torch.Generator) -> list[int]:
    """Up to ``count`` distinct tokens drawn one after another without replacement, in draw order.

    Exponential race (Efraimidis-Spirakis; Gumbel-top-k, Kool et al., arXiv 1903.06059): with
    E_x ~ Exp(1) i.i.d., sorting E_x / p(x) ascending gives the order of sequential sampling
    without replacement. Only tokens with p(x) > 0 are drawn.

    Parameters
    ----------
    probs : [vocab] a distribution (on any device; drawn on the generator's device, float64).
    """
    probs = probs.to(generator.device, torch.float64)
    uniform = torch.rand(probs.shape, generator=generator, device=generator.device, dtype=torch.float64)
    keys = torch.where(probs > 0, -torch.log1p(-uniform) / probs, torch.inf)  # [vocab] Exp(1) / p
    count = min(count, int((probs > 0).sum()))
    if count <= 0:
        return []
    return torch.topk(keys, count, largest=False).indices.tolist()


def children_from_logits(logits: torch.Tensor, counts: list[int], sampling: SamplingConfig,
                         generator: torch.Generator) -> list[Children]:
    """Ranked children of several nodes from the drafter's logits [num_nodes, vocab]."""
    if sampling.greedy:
        probs = torch.softmax(logits.float(), dim=-1)  # [num_nodes, vocab]
        top = torch.topk(probs, max(counts), dim=-1)
        tokens, weights = top.indices.tolist(), top.values.tolist()
        return [Children(tuple(tokens[i][:k]), tuple(weights[i][:k])) for i, k in enumerate(counts)]
    rows = target_probabilities(logits, sampling.temperature, sampling.top_p).cpu()  # [num_nodes, vocab]
    offered = []
    for row, count in zip(rows, counts):
        drawn = draw_without_replacement(row, count, generator)
        offered.append(Children(tuple(drawn), tuple(row[drawn].tolist()), row))
    return offered


class LevelMask:
    """Attention for one level of draft nodes over a cache of committed text + earlier levels.

    Duck-types the two methods :meth:`ModelSession.extend` reads from a tree.
    """

    def __init__(self, allowed: torch.Tensor, positions: list[int]):
        self.allowed = allowed  # [n, past + n] bool: may node i attend to column j
        self.positions = positions  # [n] absolute position of each node

    def attention_mask(self, past_length: int, dtype: torch.dtype, device) -> torch.Tensor:
        n = len(self.positions)
        mask = torch.zeros(self.allowed.shape, dtype=dtype, device=device)  # [n, past + n]
        mask.masked_fill_(~self.allowed.to(device), torch.finfo(dtype).min)
        return mask.view(1, 1, n, past_length + n)

    def position_ids(self, past_length: int, device) -> torch.Tensor:
        return torch.tensor([self.positions], dtype=torch.long, device=device)  # [1, n]


def level_mask(growth: Growth, nodes: list[int], slots: dict[int, int], committed_length: int, past: int) -> LevelMask:
    """The mask of one level forward: ``nodes`` (all of one depth) see the first
    ``committed_length`` cached positions, their ancestors' slots and themselves; records
    each node's slot (``past + row``) in ``slots``. The root sits at ``committed_length - 1``."""
    allowed = torch.zeros(len(nodes), past + len(nodes), dtype=torch.bool)  # [n, past + n]
    allowed[:, :committed_length] = True
    for row, node in enumerate(nodes):
        ancestor = growth.parents[node]
        while ancestor > 0:
            allowed[row, slots[ancestor]] = True
            ancestor = growth.parents[ancestor]
        allowed[row, past + row] = True
        slots[node] = past + row
    return LevelMask(allowed, [committed_length - 1 + growth.depth[node] for node in nodes])


def grow_tree(level_logits, root_logits: torch.Tensor, root_token: int, shape: StageShape, sampling: SamplingConfig,
              generator: torch.Generator, width: int) -> Growth:
    """Grow ``shape`` (static, or best-first up to ``width`` children a node) from a neural
    drafter: ``root_logits`` [1, vocab] rank the root's children, ``level_logits(growth, nodes)``
    [len(nodes), vocab] those of one deeper level (one forward)."""
    def expand(growth: Growth, nodes: list[int], counts: list[int]) -> list[Children]:
        logits = root_logits if nodes == [0] else level_logits(growth, nodes)
        return children_from_logits(logits, counts, sampling, generator)

    if shape.is_static:
        return grow_static(expand, root_token, shape.parents)
    return grow_best_first(expand, root_token, shape.budget, shape.depth, width)


class ModelTreeDrafter(Drafter):
    """Tree drafting with a causal LM over its own KV cache (``model:`` or ``layerskip:`` specs)."""

    def __init__(self, name: str, model: torch.nn.Module, device: torch.device, width: int = 8,
                 runtime: RuntimeMode = EAGER):
        self.name = name
        self.session = ModelSession(model, device, runtime=runtime)
        self.width = width  # most ranked children per node in best-first growth

    def reset(self) -> None:
        self.session.reset()

    def sessions(self) -> list[ModelSession]:
        return [self.session]

    def propose_tree(self, committed: list[int], shape: StageShape, sampling: SamplingConfig,
                     generator: torch.Generator) -> DraftTree:
        return self.grow(committed, shape, sampling, generator).draft_tree()

    def grow(self, committed: list[int], shape: StageShape, sampling: SamplingConfig,
             generator: torch.Generator) -> Growth:
        """The grown tree with its node scores (graft prunes by them)."""
        root_logits = self.session.extend(self.session.rewind_to(committed))[-1:]  # [1, vocab]
        committed_length = len(self.session.cached)  # = len(committed): the root is cached last
        slots: dict[int, int] = {0: committed_length - 1}  # growth node -> cache index

        def level_logits(growth: Growth, nodes: list[int]) -> torch.Tensor:
            return self._forward_level(growth, nodes, slots, committed_length)

        try:
            return grow_tree(level_logits, root_logits, committed[-1], shape, sampling, generator, self.width)
        finally:
            self.session.keep(committed_length, [])  # drop every draft node from the cache

    def _forward_level(self, growth: Growth, nodes: list[int], slots: dict[int, int],
                       committed_length: int) -> torch.Tensor:
        """One forward over ``nodes`` (all of one depth); returns logits [len(nodes), vocab]."""
        mask = level_mask(growth, nodes, slots, committed_length, len(self.session.cached))
        return self.session.extend([growth.tokens[node] for node in nodes], tree=mask)
