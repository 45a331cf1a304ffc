"""Self-speculation by layer skipping: the target's own embedding, a subset of its decoder
layers and its head, sharing the target's weights (no copy).

References: LayerSkip (arXiv 2404.16710), Draft & Verify / self-speculative decoding
(arXiv 2309.08168). The kept layers keep their original ``layer_idx``, so the view runs over
a cache laid out like the target's; layer 0 must be kept (the cache's length is read from
layer 0, and skipping it destroys acceptance: measured agreement near 0).
"""

from __future__ import annotations

import copy

import torch

from specplan.core.errors import DrafterSpecError


def parse_kept_layers(argument: str, num_layers: int) -> tuple[int, ...]:
    """``K`` -> layers 0..K-1; ``0,2,4`` -> those layers. Validated against ``num_layers``."""
    try:
        if "," in argument:
            kept = tuple(sorted({int(part) for part in argument.split(",") if part.strip()}))
        else:
            count = int(argument)
            if not 1 <= count < num_layers:
                raise DrafterSpecError(f"layerskip:{argument} must keep between 1 and {num_layers - 1} of the target's {num_layers} layers")
            kept = tuple(range(count))
    except ValueError:
        raise DrafterSpecError(f"layerskip:{argument} is not a layer count or a comma list of layer indices") from None
    if not kept or kept[0] != 0 or kept[-1] >= num_layers or len(kept) >= num_layers:
        raise DrafterSpecError(
            f"layerskip:{argument} must keep layer 0 and only layers below {num_layers}, and skip at least one"
        )
    return kept


def layer_skip_view(target: torch.nn.Module, kept: tuple[int, ...]) -> torch.nn.Module:
    """A causal-LM module that runs only ``kept`` decoder layers of ``target`` (shared weights)."""
    view = copy.copy(target)
    view._modules = dict(target._modules)
    inner = copy.copy(target.model)
    inner._modules = dict(target.model._modules)
    inner.layers = torch.nn.ModuleList([target.model.layers[index] for index in kept])
    view.model = inner
    return view
