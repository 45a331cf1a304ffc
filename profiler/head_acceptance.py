"""Acceptance of a draft head, replayed round by round on a verifier's greedy outputs.

A head's later draft tokens read its own feature estimates (EAGLE, arXiv 2401.15077), so one
teacher-forced forward (:func:`~.acceptance.replay_model`) would over-state them. Here each
round is replayed as the runtime plays it: the head catches up on the verifier's true
features for the committed text, then walks the verifier's next tokens on its own estimates
(:meth:`HeadDrafter.ranks_along`). Chains: a round at output position t accepts the leading
rank-0 tokens (at most gamma) and the next round starts at t + accepted + 1
(:func:`~.acceptance.chain_rounds`' rule). Trees: the ranks at the nodes a width-W,
depth-gamma round reaches (:func:`~.acceptance.tree_round_positions`' rule; Sequoia, arXiv
2402.12374).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specplan.runtime.drafters.head import HeadDrafter
from specplan.profiler.acceptance import AcceptanceCounter


class FeatureSource:
    """Stands in for the verifier's session: its features over a fixed text, cut to ``length``."""

    def __init__(self, token_ids: list[int], features: torch.Tensor):
        self.all_ids, self.all_features = token_ids, features
        self.cached, self.features = [], features[:0]

    def show(self, length: int) -> None:
        self.cached, self.features = self.all_ids[:length], self.all_features[:length]


@torch.inference_mode()
def verifier_features(network: torch.nn.Module, token_ids: list[int], device: torch.device) -> torch.Tensor:
    """The verifier's last hidden states [len, hidden] over ``token_ids`` (one forward, no cache)."""
    ids = torch.tensor([token_ids], device=device)
    return network.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state[0]


def replay_head(counter: AcceptanceCounter, drafter: HeadDrafter, verifier: torch.nn.Module,
                prompt_ids: Sequence[int], output_ids: Sequence[int], device: torch.device) -> torch.Tensor:
    """Count chain rounds and tree ranks of ``drafter`` over one (prompt, verifier output) pair.

    Returns the head's top-``width`` tokens at every output position as a round's first draft
    (long [output, width]; the siblings retrieval grafts are measured beside)."""
    output_ids = list(output_ids)
    if not output_ids or len(prompt_ids) < 2:
        return torch.zeros(0, counter.width, dtype=torch.long)
    text = list(prompt_ids) + output_ids
    source = FeatureSource(text, verifier_features(verifier, text, device))
    drafter.reset()
    drafter.verifier = source

    def ranks(start: int, depth: int) -> list[int]:
        committed = text[: len(prompt_ids) + start]
        source.show(len(committed) - 1)
        return drafter.ranks_along(committed, output_ids[start : start + depth], counter.width)

    start = 0
    while start + counter.gamma <= len(output_ids):
        walked = ranks(start, counter.gamma)
        accepted = next((index for index, rank in enumerate(walked) if rank != 0), counter.gamma)
        counter.add_chain(accepted)
        start += accepted + 1
    start, reached = 0, []
    while start < len(output_ids):
        walked = ranks(start, min(counter.gamma, len(output_ids) - start))
        accepted = 0
        for rank in walked:
            reached.append(rank)
            if not 0 <= rank < counter.width:
                break
            accepted += 1
        start += accepted + 1
    counter.add_ranks(reached)
    return _first_tops(drafter, source, text, len(prompt_ids), len(output_ids), counter.width)


def _first_tops(drafter: HeadDrafter, source: FeatureSource, text: list[int], prompt_length: int,
                count: int, width: int) -> torch.Tensor:
    """The head's top-``width`` first-draft tokens at each output position, from one forward
    over the verifier's true features (head position i reads f_i and token i+1, predicts i+2)."""
    head = drafter.session.model
    features = source.all_features[: len(text) - 2]  # f_0 .. f_{len-3}
    logits = head(input_ids=torch.tensor([text[1:-1]], device=features.device), features=features[None],
                  use_cache=False).logits[0]  # [len - 2, vocab]: row i predicts token i + 2
    rows = logits[prompt_length - 2 : prompt_length - 2 + count]  # output position t is token prompt_length + t
    return torch.topk(rows.float(), width, dim=-1).indices.cpu()
