"""A neural drafter: a separate small model (``model:MODEL``) or the target's own first
layers (``layerskip:K``), drafting a chain autoregressively over its own KV cache.

Greedy decoding drafts the argmax (a point-mass proposal); sampling draws each token from
the drafter's tempered distribution and returns it as ``draft_probs`` so that the
verifier's rejection sampling stays lossless (Leviathan et al., arXiv 2211.17192).
"""

from __future__ import annotations

import torch

from specplan.runtime.drafters.base import Drafter, Proposal, SamplingConfig
from specplan.runtime.sampling import target_probabilities
from specplan.core.runtime_modes import EAGER, RuntimeMode
from specplan.runtime.backend import Session
from specplan.runtime.session import as_session


def choose_token(logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator) -> tuple[int, torch.Tensor | None]:
    """Next draft token from logits [vocab]: the argmax (greedy), or a draw from the tempered /
    top-p distribution, returned with that distribution [vocab] (the token's draft row)."""
    if sampling.greedy:
        return int(torch.argmax(logits)), None
    probs = target_probabilities(logits[None, :], sampling.temperature, sampling.top_p)[0]  # [vocab]
    token = int(torch.multinomial(probs.cpu(), 1, generator=generator))
    return token, probs.cpu()


class ModelDrafter(Drafter):
    def __init__(self, name: str, model: "torch.nn.Module | Session", device: torch.device, runtime: RuntimeMode = EAGER):
        self.name = name
        self.session = as_session(model, device, runtime)  # any backend: a chain needs only extend

    def reset(self) -> None:
        self.session.reset()

    def sessions(self) -> list[Session]:
        return [self.session]

    def propose(self, committed: list[int], gamma: int, sampling: SamplingConfig, generator: torch.Generator) -> Proposal:
        uncached = self.session.rewind_to(committed)
        logits = self.session.extend(uncached)[-1]  # [vocab]
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for index in range(gamma):
            token, probs = choose_token(logits, sampling, generator)
            tokens.append(token)
            if probs is not None:
                rows.append(probs)
            if index + 1 < gamma:
                logits = self.session.extend([token])[-1]
        return Proposal(tuple(tokens), torch.stack(rows) if rows else None)
