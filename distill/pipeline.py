"""One ``specplan distill`` run: data, initialisation, training, saving, evaluation, manifest.

Layout of the output directory (a normal Hugging Face checkpoint, so ``--drafter model:DIR``
loads it): ``config.json``, ``model.safetensors``, the tokenizer files, ``distill.yaml`` (the
manifest), and ``distill-cache/`` (the target's outputs and logits, the evaluation outputs
and the training checkpoint; a rerun into the same directory reuses them and resumes).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specplan.core.errors import SpecplanError
from specplan.core.prompts import drafter_training_prompts, spec_bench_split, stratified
from specplan.runtime.build import eos_ids
from specplan.distill.config import DistillConfig
from specplan.distill.data import decode_answers, load_answers, load_sequences, save_answers, save_sequences, score_answers
from specplan.distill.evaluate import DrafterScore, load_or_make_outputs, score, target_t1
from specplan.distill.init import build_drafter, default_layers
from specplan.distill.manifest import write_manifest
from specplan.distill.self_prompts import self_written_prompts
from specplan.distill.train import TrainResult, run_key, train
from specplan.runtime.drafters.layerskip import layer_skip_view
from specplan.models.load import DTYPES, LoadedModel, load_model

CACHE = "distill-cache"


@dataclass(frozen=True)
class DistillReport:
    output: Path
    layers: tuple[int, ...]
    data_seconds: float
    result: TrainResult
    scores: tuple[DrafterScore, ...]  # the trained drafter first, then the untrained baselines
    target_t1_ms: float
    eval_prompt_ids: tuple[str, ...]


def check_output(output: Path) -> None:
    """Refuse a non-empty directory that no distill run wrote (it would be mixed with a checkpoint)."""
    if output.is_file():
        raise SpecplanError(f"{output} is a file; pass -o a directory for the drafter checkpoint")
    if output.is_dir() and any(output.iterdir()) and not (output / CACHE).is_dir() and not (output / "distill.yaml").is_file():
        raise SpecplanError(f"{output} is a non-empty directory that `specplan distill` did not write; pass -o a new directory")


def training_data(target: LoadedModel, config: DistillConfig, cache: Path):
    prompts = drafter_training_prompts(config.data.train_limit)
    key = {"fingerprint": target.fingerprint, "prompts": [p.prompt_id for p in prompts],
           "data": dataclasses.asdict(config.data), "seed": config.train.seed}
    sequences = load_sequences(cache / "data.pt", key)
    if sequences is None:
        answers = load_answers(cache / "answers.pt", key)
        if answers is None:
            extra = self_written_prompts(target.model, target.tokenizer, config.data.self_prompts, config.train.seed,
                                         eos_ids(target), batch_size=config.data.batch_size)
            answers = decode_answers(target.model, target.tokenizer, prompts + extra, config.data, eos_ids(target),
                                     config.train.seed)
            save_answers(cache / "answers.pt", answers, key)
        sequences = score_answers(target.model, answers, config.data)
        save_sequences(cache / "data.pt", sequences, key)
    return prompts, sequences


def _as_dtype(target: LoadedModel, dtype: str) -> LoadedModel:
    target.model.to(DTYPES[dtype])
    return dataclasses.replace(target, dtype=dtype)


def _evaluate(target: LoadedModel, output: Path, layers: tuple[int, ...], config: DistillConfig, device) -> tuple:
    """Scores of the saved drafter and of the untrained layer-skip views with as many layers."""
    prompts = stratified(spec_bench_split("evaluation"), config.evaluation.eval_limit)
    pairs = load_or_make_outputs(output / CACHE / "eval.pt", target, prompts, config.evaluation, device)
    drafter = load_model(str(output), target.dtype, str(device))
    scores = [score("distilled", drafter.model, pairs, config.evaluation, device)]
    baselines = {tuple(range(len(layers))): f"layerskip:{len(layers)}"}
    baselines.setdefault(layers, "layerskip:" + ",".join(map(str, layers)))  # the drafter before training
    for kept, name in baselines.items():
        if kept[0] == 0:  # layer_skip_view needs layer 0 (runtime/drafters/layerskip.py)
            scores.append(score(name, layer_skip_view(target.model, kept), pairs, config.evaluation, device))
    return prompts, tuple(scores), target_t1(target, pairs, config.evaluation, device)


def prepare_output(output: Path, config: DistillConfig, restart: bool) -> tuple[float, float, Path]:
    """Start a run in ``output``: (start time, training deadline, cache directory), the
    checkpoint dropped when ``restart``."""
    started = time.monotonic()
    check_output(output)
    cache = output / CACHE
    if restart and (cache / "checkpoint.pt").is_file():
        (cache / "checkpoint.pt").unlink()
    cache.mkdir(parents=True, exist_ok=True)
    return started, started + 60.0 * config.train.budget_minutes, cache


def run_distill(source: str, output: Path, config: DistillConfig, device: torch.device,
                restart: bool = False, evaluate: bool = True) -> DistillReport:
    """Distill a drafter for ``source`` into ``output`` (resuming a run found there)."""
    started, deadline, cache = prepare_output(output, config, restart)
    target = load_model(source, "float32", str(device))
    layers = config.layers or default_layers(target.model.config.num_hidden_layers, config.num_layers)
    drafter = build_drafter(target.model, layers)  # from the float32 weights
    target = _as_dtype(target, config.data.dtype)
    train_prompts, sequences = training_data(target, config, cache)
    data_seconds = time.monotonic() - started
    key = run_key(config.train, {"fingerprint": target.fingerprint, "layers": list(layers), "data": dataclasses.asdict(config.data)})
    result = train(drafter, sequences, config.train, cache / "checkpoint.pt", deadline, key)
    _save(drafter, target, output)
    eval_prompts, scores, t1 = (), (), float("nan")
    if evaluate:
        eval_prompts, scores, t1 = _evaluate(target, output, layers, config, device)
    report = DistillReport(output, layers, data_seconds, result, scores, t1, tuple(p.prompt_id for p in eval_prompts))
    write_manifest(output / "distill.yaml", source, target, config, report, train_prompts, eval_prompts, len(sequences))
    return report


def _save(drafter: torch.nn.Module, target: LoadedModel, output: Path) -> None:
    """``save_pretrained`` (safetensors) plus the target's tokenizer, replacing an older save."""
    partial = output / (CACHE + "/model.partial")
    if partial.exists():
        shutil.rmtree(partial)
    drafter.save_pretrained(str(partial))
    target.tokenizer.save_pretrained(str(partial))
    for item in partial.iterdir():
        item.replace(output / item.name)
    partial.rmdir()
