"""Training data of a draft head: the target's features over its own texts, and the drafter vocabulary.

A head learns from the same target-written texts as a distilled model (FastDraft, arXiv
2411.11055; :mod:`.data`), plus, at every position, the target's feature ``f_t`` (its last
hidden state after the final norm, EAGLE arXiv 2401.15077) from one teacher-forced forward.

The drafter vocabulary keeps the ``size`` tokens the target emits most often on those texts
(its top-1 choice at every position, and the texts' own tokens), EOS always included: the
coverage side of vocabulary trimming (arXiv 2603.05210); ``coverage`` measures what share
of held-out target tokens the kept set contains.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from specplan.core.files import write_file_atomic
from specplan.distill.data import TrainingSequence

FEATURES_VERSION = 1


@dataclass(frozen=True)
class HeadSequence:
    text: TrainingSequence
    features: torch.Tensor  # [length, hidden] the target's last hidden states (stored bfloat16)


@torch.no_grad()  # not inference_mode: the features enter autograd as training inputs
def target_features(model: torch.nn.Module, token_ids: torch.Tensor) -> torch.Tensor:
    """One teacher-forced forward of the target's decoder: features [length, hidden]."""
    ids = token_ids[None, :].to(model.device)
    return model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state[0].cpu()


def head_sequences(model: torch.nn.Module, sequences: list[TrainingSequence], path: Path, key: dict) -> list[HeadSequence]:
    """The sequences with the target's features, cached at ``path`` under ``key``."""
    if path.is_file():
        stored = torch.load(path, weights_only=True)
        if stored.get("version") == FEATURES_VERSION and stored.get("key") == key:
            return [HeadSequence(text, features.float()) for text, features in zip(sequences, stored["features"])]
    features = [target_features(model, sequence.token_ids).to(torch.bfloat16)
                for sequence in tqdm(sequences, desc="distill: target features", unit="text")]
    record = {"version": FEATURES_VERSION, "key": key, "features": features}
    write_file_atomic(path, lambda temporary: torch.save(record, temporary))
    return [HeadSequence(text, feature.float()) for text, feature in zip(sequences, features)]


def choose_vocabulary(sequences: Iterable[TrainingSequence], vocab_size: int, size: int, always: Iterable[int] = ()) -> torch.Tensor:
    """The ``size`` most frequent target tokens (top-1 choices and text tokens), sorted ids [size].

    Ties (and tokens never seen) are broken by the lower id. ``size`` 0 or >= ``vocab_size``
    keeps the whole vocabulary.
    """
    if size <= 0 or size >= vocab_size:
        return torch.arange(vocab_size)
    counts = torch.zeros(vocab_size, dtype=torch.float64)
    for sequence in sequences:
        counts += torch.bincount(sequence.top_indices[:, 0].long(), minlength=vocab_size).double()
        counts += torch.bincount(sequence.token_ids.long(), minlength=vocab_size).double()
    forced = torch.tensor(sorted(set(int(token) for token in always if 0 <= int(token) < vocab_size)), dtype=torch.long)
    counts[forced] = float("inf")
    order = sorted(range(vocab_size), key=lambda token: (-counts[token].item(), token))
    return torch.tensor(sorted(order[:size]), dtype=torch.long)


def coverage(vocab_ids: torch.Tensor, token_lists: Iterable[Iterable[int]]) -> float:
    """Share of the tokens in ``token_lists`` that the kept vocabulary contains."""
    kept = set(vocab_ids.tolist())
    tokens = [int(token) for tokens in token_lists for token in tokens]
    return sum(token in kept for token in tokens) / len(tokens) if tokens else float("nan")
