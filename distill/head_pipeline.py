"""One ``specplan distill --kind head`` run: data, features, vocabulary, training, saving, evaluation.

Output directory: ``head.safetensors`` + ``head.json`` (what ``--drafter head:DIR`` loads),
``distill.yaml`` (the manifest) and ``distill-cache/`` (the target's texts, logits and
features, the evaluation outputs and the training checkpoint; a rerun resumes from them).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specplan.core.prompts import spec_bench_split, stratified
from specplan.runtime.build import eos_ids
from specplan.distill.config import DistillConfig
from specplan.distill.evaluate import DrafterScore, context_ids, load_or_make_outputs, target_t1
from specplan.distill.head_data import choose_vocabulary, coverage, head_sequences
from specplan.distill.head_train import freeze_head, head_sequence_loss, new_head
from specplan.distill.manifest import write_manifest
from specplan.distill.pipeline import prepare_output, training_data
from specplan.distill.train import TrainResult, run_key, train
from specplan.runtime.drafters.head import HeadDrafter
from specplan.runtime.drafters.head_model import load_head, save_head
from specplan.models.load import DTYPES, load_model
from specplan.profiler.acceptance import AcceptanceCounter
from specplan.profiler.head_acceptance import replay_head
from specplan.profiler.latency import measure_head_latency


@dataclass(frozen=True)
class HeadReport:
    output: Path
    kept_vocabulary: int
    data_seconds: float
    result: TrainResult
    scores: tuple[DrafterScore, ...]
    target_t1_ms: float
    eval_prompt_ids: tuple[str, ...]
    eval_coverage: float  # share of held-out target tokens in the kept vocabulary


def score_head(directory: Path, target, pairs, config: DistillConfig, device: torch.device) -> DrafterScore:
    """The saved head's held-out acceptance (replayed round by round) and its T(1)."""
    head = load_head(directory, target.model, DTYPES[target.dtype], device)
    drafter = HeadDrafter("head", head, device)
    counter = AcceptanceCounter(config.evaluation.gamma, config.evaluation.width)
    for prompt_ids, output_ids in pairs:
        replay_head(counter, drafter, target.model, prompt_ids, output_ids, device)
    t1 = measure_head_latency(head, device, context_ids(pairs, config.evaluation.context), (1,),
                              config.evaluation.repeats).ms[0]  # as the profiler times a head
    top1 = counter.rank_accept[0] if counter.rank_accept else 0.0
    return DrafterScore("head", counter.alpha, top1, counter.rank_accept, tuple(counter.hist), t1)


def run_head_distill(source: str, output: Path, config: DistillConfig, device: torch.device, vocabulary: int,
                     restart: bool = False, evaluate: bool = True, layout: str = "eagle1") -> HeadReport:
    """Train a draft head for ``source`` into ``output`` (resuming a run found there); ``layout``
    ``eagle3`` trains EAGLE-3's layer, which ``export --engine vllm|sglang`` writes for the engines."""
    started, deadline, cache = prepare_output(output, config, restart)
    target = load_model(source, config.data.dtype, str(device))
    train_prompts, texts = training_data(target, config, cache)
    data_key = {"fingerprint": target.fingerprint, "dtype": target.dtype, "prompts": [p.prompt_id for p in train_prompts],
                "data": dataclasses.asdict(config.data), "seed": config.train.seed}
    sequences = head_sequences(target.model, texts, cache / "features.pt", data_key)
    data_seconds = time.monotonic() - started
    vocab_ids = choose_vocabulary(texts, target.model.config.vocab_size, vocabulary, eos_ids(target))
    head = new_head(target.model, vocab_ids, layout)
    key = run_key(config.train, {"fingerprint": target.fingerprint, "kind": "head", "vocabulary": vocabulary,
                                 **({"layout": layout} if layout != "eagle1" else {}),
                                 "data": dataclasses.asdict(config.data)})
    result = train(head, sequences, config.train, cache / "checkpoint.pt", deadline, key,
                   loss_of=head_sequence_loss, freeze=freeze_head)
    save_head(head, output, {"target": {"source": source, "fingerprint": target.fingerprint}})
    scores, t1, eval_prompts, eval_coverage = (), float("nan"), [], float("nan")
    if evaluate:
        eval_prompts = stratified(spec_bench_split("evaluation"), config.evaluation.eval_limit)
        pairs = load_or_make_outputs(cache / "eval.pt", target, eval_prompts, config.evaluation, device)
        scores = (score_head(output, target, pairs, config, device),)
        t1 = target_t1(target, pairs, config.evaluation, device)
        eval_coverage = coverage(vocab_ids, [output_ids for _, output_ids in pairs])
    report = HeadReport(output, len(vocab_ids), data_seconds, result, scores, t1,
                        tuple(p.prompt_id for p in eval_prompts), eval_coverage)
    write_manifest(output / "distill.yaml", source, target, config, report, train_prompts, eval_prompts, len(sequences))
    return report
