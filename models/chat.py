"""Prompt text -> token ids, with the model's chat template when it has one."""

from __future__ import annotations

from specplan.core.errors import PromptError


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` as a user turn (chat template + generation prompt) or plain text."""
    if not text or not text.strip():
        raise PromptError("the prompt is empty; pass --prompt TEXT with some text or --prompts FILE")
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    return [int(t) for t in tokenizer(text)["input_ids"]]
