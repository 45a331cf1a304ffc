"""Batched decoding: several prompts in lockstep rounds, each sequence its own accepted length,
KV rows and rollback (docs/guide.md, "Batched runs"). :mod:`.engine` the sequence stage,
:mod:`.tree` the tree stage, :mod:`.cache` the ragged KV cache, :mod:`.drafters` the batched
drafters and :mod:`.build` a plan's configuration at batch ``b`` as a live engine."""

from .engine import BatchedEngine, BatchedResult, BatchedSequence

__all__ = ["BatchedEngine", "BatchedResult", "BatchedSequence"]
