"""One verifier forward over a draft tree on top of a KV cache.

The cache holds ``past_length`` committed positions; the tree's root (the last committed
token) and its drafted nodes are fed together, each attending to the cache and to its own
ancestors (SpecInfer, arXiv 2305.09781; EAGLE, arXiv 2401.15077). Afterwards the cache
holds ``past_length + num_nodes`` positions; keep the accepted path with
``specplan.runtime.kv.keep_nodes(cache, past_length, (0, *accepted_nodes))``.
"""

from __future__ import annotations

import torch

from specplan.runtime.tree import DraftTree


@torch.no_grad()
def tree_forward(model: torch.nn.Module, cache, tree: DraftTree, past_length: int) -> torch.Tensor:
    """Verifier logits [num_nodes, vocab]: row i is the distribution of the token after node i.

    Parameters
    ----------
    model : a transformers causal LM (5.x) taking a 4-D additive float mask.
    cache : its ``DynamicCache`` holding exactly ``past_length`` positions.
    tree : the draft; ``tree.tokens[0]`` is the last committed token.
    past_length : committed positions already in the cache.
    """
    cached = int(cache.get_seq_length())
    if cached != past_length:
        raise ValueError(f"the cache holds {cached} positions but past_length is {past_length}")
    device = model.get_input_embeddings().weight.device
    dtype = model.dtype
    input_ids = tree.tokens.to(device).unsqueeze(0)  # [1, num_nodes]
    output = model(
        input_ids=input_ids,
        attention_mask=tree.attention_mask(past_length, dtype, device),
        position_ids=tree.position_ids(past_length, device),
        past_key_values=cache,
        use_cache=True,
    )
    return output.logits[0]
