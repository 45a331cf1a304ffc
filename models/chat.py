"""Prompt text -> token ids, with the model's chat template when it has one."""

from __future__ import annotations

from specplan.core.errors import PromptError


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` as a user turn (chat template + generation prompt) or plain text."""
    if not text or not text.strip():
        raise PromptError("the prompt is empty; pass --prompt TEXT with some text or --prompts FILE")
    if getattr(tokenizer, "chat_template", None):
        return encode_messages(tokenizer, [{"role": "user", "content": text}])
    return [int(t) for t in tokenizer(text)["input_ids"]]


def encode_messages(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of a conversation (``role`` / ``content`` dicts) through the model's chat template,
    ending with the assistant's generation prompt; without a template, the turns' text one after another."""
    if not getattr(tokenizer, "chat_template", None):
        return [int(t) for t in tokenizer("\n".join(message["content"] for message in messages))["input_ids"]]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    if isinstance(ids, dict) or hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(t) for t in ids]
