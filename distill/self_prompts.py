"""Prompts the target writes itself: more varied training text than the calibration split holds.

Magpie (arXiv 2406.08464): an instruction-tuned model given only the chat template up to the
start of a user turn samples a plausible user message. The target's greedy answers to those
messages are text it would write, on topics it finds likely, so a drafter trained on them
sees many more contexts than the ~120 calibration questions give (a draft head trained on
those alone agreed with the target on 0.70 of training positions but 0.38 held out).
"""

from __future__ import annotations

import torch
from tqdm import tqdm

from specplan.core.prompts import Prompt

MARK = "\u2063specplan-user-turn\u2063"  # a placeholder that no real message contains


def user_turn_prefix(tokenizer) -> list[int]:
    """Token ids of the chat template up to where a user message begins."""
    if not getattr(tokenizer, "chat_template", None):
        return []
    text = tokenizer.apply_chat_template([{"role": "user", "content": MARK}], add_generation_prompt=False, tokenize=False)
    prefix = text.split(MARK)[0]
    return [int(t) for t in tokenizer(prefix, add_special_tokens=False)["input_ids"]]


@torch.inference_mode()
def self_written_prompts(model, tokenizer, count: int, seed: int, eos_ids: set[int], batch_size: int = 24,
                         max_tokens: int = 48, temperature: float = 1.0) -> list[Prompt]:
    """``count`` user messages sampled by the target from the bare user-turn prefix (empty or
    repeated messages are dropped, so a few fewer may come back)."""
    prefix = user_turn_prefix(tokenizer)
    if count <= 0 or not prefix:
        return []
    torch.manual_seed(seed * 7919 + 17)
    ids = torch.tensor([prefix], device=model.device)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids or {0})
    texts: list[str] = []
    with tqdm(total=count, desc="distill: target writing its own prompts", unit="prompt") as bar:
        for start in range(0, count, batch_size):
            wanted = min(batch_size, count - start)
            output = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                                    temperature=temperature, top_p=0.95, top_k=0, max_new_tokens=max_tokens,
                                    num_return_sequences=wanted, pad_token_id=pad_id, eos_token_id=sorted(eos_ids) or None)
            for row in output[:, len(prefix):].tolist():
                text = tokenizer.decode(row, skip_special_tokens=True).strip()
                if text and text not in texts:
                    texts.append(text)
            bar.update(wanted)
    return [Prompt(f"self-{index}", "self-written", text) for index, text in enumerate(texts)]
