"""A prompt and its new tokens must fit in the target's context window.

Past ``max_position_embeddings`` a model's positions are ones it never trained on and it
decodes garbage, so the runner refuses such a request before decoding, saying by how much it
is over. The draft of the widest stage can run past the last new token by up to its width, so
that width counts too.
"""

from __future__ import annotations

from specplan.core.errors import PromptError
from specplan.core.plan import Plan


def model_context(config) -> int | None:
    """The positions a model was trained on (``max_position_embeddings``), None if unknown."""
    value = getattr(config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def draft_width(plan: Plan) -> int:
    """The most positions one draft of the plan adds beyond the committed text (0: plain decoding): of its
    stages, and of its schedule's rows, which a round may play in their place (runtime/load_schedule.py)."""
    stages = list(plan.stages) + ([s for row in plan.schedule.rows for s in row.stages] if plan.schedule else [])
    widths = [len(s.shape.parents) or s.shape.budget or s.shape.gamma + 1 for s in stages]
    return max(widths, default=0)


def check_fits(prompt_tokens: int, max_new_tokens: int, extra: int, context: int | None, label: str = "the prompt") -> None:
    """PromptError (one line) when prompt + new tokens + draft width exceed ``context``."""
    if context is None:
        return
    needed = prompt_tokens + max_new_tokens + extra
    if needed > context:
        raise PromptError(
            f"{label} is {prompt_tokens} tokens; with {max_new_tokens} new tokens and a draft of {extra} it needs "
            f"{needed} positions, {needed - context} over the model's context of {context}; shorten the prompt "
            "or lower --max-new-tokens"
        )
