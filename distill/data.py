"""Training data: the target's own continuations of calibration prompts and its top-k
log-probabilities over every position, cached on disk.

FastDraft (arXiv 2411.11055) trains drafters on text the target generated itself, so that
the drafter learns the distribution it will be verified against. Here the target decodes
each calibration prompt greedily (and, optionally, with sampling), then one teacher-forced
forward over prompt + continuation records, for every position, the target's top-k token
ids and their log-probabilities (the support of the truncated KL in ``train``). Prompts are
decoded in left-padded batches through ``generate``: on 2 CPU cores a batch of 24 costs
little more per step than one sequence. (Batched bf16 decoding may part from the
runtime's unbatched greedy at numerical near-ties; for training data that is harmless.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from specplan.core.files import write_file_atomic
from specplan.core.errors import SpecplanError
from specplan.core.prompts import Prompt
from specplan.models.chat import encode_prompt
from specplan.distill.config import DataConfig

DATA_VERSION = 1
TOKEN_BUDGET = 16384  # (prompt + answer) tokens of one decoding batch


@dataclass(frozen=True)
class TrainingSequence:
    prompt_id: str
    token_ids: torch.Tensor  # long [length]: prompt + continuation
    prompt_length: int  # the first prompt_length tokens are the prompt
    top_indices: torch.Tensor  # int32 [length - 1, k]: row t ranks the target's candidates for token t + 1
    top_logprobs: torch.Tensor  # float32 [length - 1, k]: their log-probabilities (full-vocabulary softmax)

    def to_record(self) -> dict:
        return {"prompt_id": self.prompt_id, "token_ids": self.token_ids, "prompt_length": self.prompt_length,
                "top_indices": self.top_indices, "top_logprobs": self.top_logprobs.to(torch.float16)}

    @classmethod
    def from_record(cls, record: dict) -> "TrainingSequence":
        return cls(str(record["prompt_id"]), record["token_ids"].long(), int(record["prompt_length"]),
                   record["top_indices"].int(), record["top_logprobs"].float())


def _pad_left(batch: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ids [batch, longest] and the attention mask (1 on real tokens)."""
    longest = max(len(ids) for ids in batch)
    ids = torch.tensor([[pad_id] * (longest - len(row)) + row for row in batch])
    mask = torch.tensor([[0] * (longest - len(row)) + [1] * len(row) for row in batch])
    return ids, mask


def _strip_after_eos(tokens: list[int], eos_ids: set[int]) -> list[int]:
    for index, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: index + 1]
    return tokens


@torch.inference_mode()
def generate_batch(model: torch.nn.Module, batch: list[list[int]], config: DataConfig, eos_ids: set[int],
                   pad_id: int, sample: bool) -> list[list[int]]:
    """Continuations of ``batch`` (greedy, or sampled at ``config.temperature``), cut after EOS."""
    ids, mask = _pad_left(batch, pad_id)
    options = {"do_sample": True, "temperature": config.temperature, "top_k": 0, "top_p": 1.0} if sample else {"do_sample": False}
    output = model.generate(input_ids=ids.to(model.device), attention_mask=mask.to(model.device),
                            max_new_tokens=config.max_new_tokens, pad_token_id=pad_id, eos_token_id=sorted(eos_ids) or None,
                            **options)
    new = output[:, ids.shape[1]:].tolist()  # [batch, <= max_new_tokens]
    return [_strip_after_eos(row, eos_ids) for row in new]


@torch.inference_mode()
def target_top_logprobs(model: torch.nn.Module, token_ids: list[int], top_k: int,
                        rows: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """One teacher-forced forward: the target's top-k ids [length - 1, k] and log-probs for each next token.

    The LM head runs ``rows`` positions at a time, so no [length, vocab] float32 tensor is ever
    whole (a 1000-token text's would be 200 MB; allocations of ever-changing size that large
    fragment the CPU allocator)."""
    ids = torch.tensor([token_ids], device=model.device)
    hidden = model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state[0, :-1]  # [length - 1, hidden]
    head = model.get_output_embeddings()
    indices, values = [], []
    for start in range(0, hidden.shape[0], rows):
        logprobs = torch.log_softmax(head(hidden[start:start + rows]).float(), dim=-1)  # [<= rows, vocab]
        top = torch.topk(logprobs, top_k, dim=-1)
        indices.append(top.indices.int().cpu())
        values.append(top.values.cpu())
    return torch.cat(indices), torch.cat(values)


def decode_batches(lengths: list[int], batch_size: int, token_budget: int = TOKEN_BUDGET) -> list[list[int]]:
    """Indices of prompts decoded together: similar lengths side by side, at most ``batch_size``
    prompts and (longest prompt + answer) x count <= ``token_budget`` (long prompts in small
    batches: a batch's prefill attention grows with count x longest^2)."""
    order = sorted(range(len(lengths)), key=lambda index: lengths[index])
    batches: list[list[int]] = []
    for index in order:
        batch = batches[-1] if batches else None
        if batch is None or len(batch) >= batch_size or (len(batch) + 1) * lengths[index] > token_budget:
            batches.append([index])
        else:
            batch.append(index)
    return batches


def _continuations(model, tokenizer, prompts: list[Prompt], config: DataConfig, eos_ids: set[int], seed: int):
    """(prompt, prompt ids, continuation) for every prompt: greedy first, then the sampled ones."""
    encoded = [(prompt, encode_prompt(tokenizer, prompt.text)) for prompt in prompts]
    batches = decode_batches([len(ids) + config.max_new_tokens for _, ids in encoded], config.batch_size)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids or {0})
    passes = [False] + [True] * config.sampled_per_prompt
    results = []
    with tqdm(total=len(encoded) * len(passes), desc="distill: target answering the training prompts", unit="prompt") as bar:
        for number, sample in enumerate(passes):
            torch.manual_seed(seed * 1000 + number)
            for batch in batches:
                chosen = [encoded[index] for index in batch]
                outputs = generate_batch(model, [ids for _, ids in chosen], config, eos_ids, pad_id, sample)
                results.extend((prompt, ids, output) for (prompt, ids), output in zip(chosen, outputs))
                bar.update(len(chosen))
    return results


def decode_answers(model, tokenizer, prompts: list[Prompt], config: DataConfig, eos_ids: set[int],
                   seed: int) -> list[tuple[str, list[int], list[int]]]:
    """(prompt id, prompt ids, answer ids) of the target's answer to every prompt."""
    return [(prompt.prompt_id, ids, output) for prompt, ids, output in _continuations(model, tokenizer, prompts, config, eos_ids, seed)]


def save_answers(path: Path, answers: list, key: dict) -> None:
    """Keep the decoded answers (most of the data time) so a rerun after a crash starts from them."""
    record = {"version": DATA_VERSION, "key": key, "answers": answers}
    write_file_atomic(path, lambda temporary: torch.save(record, temporary))


def load_answers(path: Path, key: dict) -> list | None:
    if not path.is_file():
        return None
    stored = torch.load(path, weights_only=True)
    return stored["answers"] if stored.get("version") == DATA_VERSION and stored.get("key") == key else None


def score_answers(model, answers: list[tuple[str, list[int], list[int]]], config: DataConfig) -> list[TrainingSequence]:
    """The target's top-k log-probabilities over every prompt + answer text."""
    sequences = []
    for prompt_id, prompt_ids, output in tqdm(answers, desc="distill: target logits", unit="text"):
        token_ids = (list(prompt_ids) + list(output))[-config.max_length:]
        prompt_length = max(0, len(token_ids) - len(output))
        indices, logprobs = target_top_logprobs(model, token_ids, config.top_k)
        sequences.append(TrainingSequence(str(prompt_id), torch.tensor(token_ids), prompt_length, indices, logprobs))
    return sequences


def save_sequences(path: Path, sequences: list[TrainingSequence], key: dict) -> None:
    """Write the sequences with ``key`` (what produced them) atomically."""
    record = {"version": DATA_VERSION, "key": key, "sequences": [s.to_record() for s in sequences]}
    write_file_atomic(path, lambda temporary: torch.save(record, temporary))


def load_sequences(path: Path, key: dict) -> list[TrainingSequence] | None:
    """The cached sequences if ``path`` holds data made with the same ``key``, else None."""
    if not path.is_file():
        return None
    try:
        stored = torch.load(path, weights_only=True)
    except Exception as error:  # a truncated or foreign file: regenerate
        raise SpecplanError(f"{path} is not readable distillation data ({type(error).__name__}); delete it to regenerate") from None
    if stored.get("version") != DATA_VERSION or stored.get("key") != key:
        return None
    return [TrainingSequence.from_record(record) for record in stored["sequences"]]
