"""``specplan distill``: train a small drafter for a target from the target's own outputs.

Self-distillation as in FastDraft (arXiv 2411.11055): the target decodes the Spec-Bench
calibration prompts, and a few-layer copy of the target (its embedding, a subset of its
decoder layers, its final norm and LM head) learns the target's next-token distributions
over those texts. The result is a normal Hugging Face checkpoint that ``--drafter
model:DIR`` loads. Modules: ``config`` (settings), ``data`` (target outputs and top-k
logits, cached), ``init`` (the layer-skip initialisation), ``train`` (loss, loop,
checkpoints), ``evaluate`` (alpha, rank vector, T(1)), ``pipeline`` and ``command`` (CLI).
"""
