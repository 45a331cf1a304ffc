"""Rank acceptance of retrieval drafters, alone and grafted beside a model's children.

Replaying the target's greedy output (as :mod:`.acceptance` does for models): at every
output position the retrieval drafter, given the committed text so far (and, for Token
Recycling, the target's logits after every earlier token, as the runtime's forwards would
have fed its table), ranks up to W candidates for the next token.

- ``rank_accept[k]`` (Sequoia's positional acceptance, arXiv 2402.12374): how often the
  target's token is the (k+1)-th candidate. This sizes a retrieval drafter's own tree
  (``ngram:N`` with several continuations, ``recycle``, ``cache``).
- ``retrieval_rank_accept[j]`` (Graft, arXiv 2605.20104; planner-math.md section 3): the same
  for the candidates left after removing the model drafter's top-B children at that
  position (de-duplication), i.e. the acceptance of the j-th *extra* sibling with the
  model's siblings present. Extended vector for the tree DP: [p_1..p_B, r_1..r_R].
- ``accepted_hist`` / ``alpha``: chains of the drafter's sequence proposal (``propose``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from specplan.runtime.profiler.acceptance import AcceptanceCounter


@torch.inference_mode()
def teacher_forced_logits(model: torch.nn.Module, ids: Sequence[int], device: torch.device) -> torch.Tensor:
    """Logits float32 [len(ids), vocab] on the CPU; row i follows token i."""
    logits = model(input_ids=torch.tensor([list(ids)], device=device), use_cache=False).logits[0]
    return logits.float().cpu()


def _rank(candidates: Sequence[int], token: int) -> int:
    return candidates.index(token) if token in candidates else -1


def replay_retrieval(counter: AcceptanceCounter, drafter, chain: Callable[[list[int], int], Sequence[int]],
                     prompt_ids: Sequence[int], output_ids: Sequence[int], *,
                     target_logits: torch.Tensor | None = None, model_top: torch.Tensor | None = None,
                     graft_counter: AcceptanceCounter | None = None) -> None:
    """Replay one prompt's greedy output through a retrieval tree drafter.

    Parameters
    ----------
    counter : gets the chain histogram (``chain``, timed for ``ms_per_call``) and the ranks of
        the target's token among the drafter's ``counter.width`` candidates.
    drafter : a RetrievalTreeDrafter (reset here: tables are per prompt, as at run time).
    chain : the sequence proposal, ``chain(committed, gamma) -> tokens``.
    target_logits : [len(prompt) + len(output), vocab] teacher-forced target logits; fed to a
        drafter with ``observe`` for every token before the draft's root.
    model_top : [len(output), B] the model drafter's top-B tokens at each output position;
        with ``graft_counter``, the ranks among the remaining candidates go there.
    """
    drafter.reset()
    context = list(prompt_ids)
    output = list(output_ids)
    observe = getattr(drafter, "observe", None)
    fed = 0  # tokens whose target row the drafter has seen
    for position in range(len(output)):
        committed = context + output[:position]
        if observe is not None and target_logits is not None and len(committed) - 1 > fed:
            observe(committed[fed:-1], target_logits[fed : len(committed) - 1])
            fed = len(committed) - 1
        drafter.prepare(committed)
        tail = committed[-drafter.context_tokens:]
        candidates = list(drafter.successors(tail, max(counter.width, graft_counter.width if graft_counter else 0)).tokens)
        truth = output[position]
        counter.add_ranks([_rank(candidates[: counter.width], truth)])
        if graft_counter is not None and model_top is not None:
            siblings = set(model_top[position].tolist())
            extras = [token for token in candidates if token not in siblings][: graft_counter.width]
            graft_counter.add_ranks([-1 if truth in siblings else _rank(extras, truth)])
        if position + counter.gamma <= len(output):
            begin = time.perf_counter()
            proposal = list(chain(committed, counter.gamma))
            counter.seconds += time.perf_counter() - begin
            counter.calls += 1
            accepted = 0
            while accepted < len(proposal) and proposal[accepted] == output[position + accepted]:
                accepted += 1
            counter.add_chain(accepted)
