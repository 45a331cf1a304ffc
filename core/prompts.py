"""Prompts: Spec-Bench questions (MT-bench style ``turns``) or plain ``prompt`` JSONL.

The calibration / evaluation split is fixed here, by question_id, so that profiling never
sees the prompts that benchmarks report: calibration = question_id divisible by 4 (120 of
Spec-Bench's 480, every category represented), evaluation = the rest.
"""

from __future__ import annotations

import importlib.resources
import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from specplan.core.errors import PromptError

CALIBRATION_MODULUS = 4


@dataclass(frozen=True)
class Prompt:
    """One prompt; ``prediction``: the text its answer is expected to be (OpenAI's Predicted Outputs, as an
    editor sends the code it asks to change), "" where none: a profile replays it as a drafter
    (profiler/prediction_acceptance.py)."""

    prompt_id: str
    category: str
    text: str
    prediction: str = ""


def spec_bench_path() -> Path:
    """Spec-Bench's question.jsonl: ``$SPECPLAN_SPEC_BENCH``, else the copy installed with the package
    (``core/data/spec-bench``, read through importlib.resources so that a wheel finds it too)."""
    override = os.environ.get("SPECPLAN_SPEC_BENCH")
    if override:
        return Path(override)
    candidate = Path(str(importlib.resources.files("specplan.core").joinpath("data/spec-bench/question.jsonl")))
    if candidate.is_file():
        return candidate
    raise PromptError("Spec-Bench question.jsonl not found; set SPECPLAN_SPEC_BENCH to its path or pass --prompts FILE")


def read_prompts(path: str | Path, turn: int = 0) -> list[Prompt]:
    """Read JSONL rows with ``turns`` (the ``turn``-th is used) or ``prompt``, and an optional ``prediction``
    (the expected answer's text); reject empty prompts."""
    path = Path(path)
    if not path.is_file():
        raise PromptError(f"prompts file {path} does not exist; pass a JSONL file with `prompt` or `turns` per line")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PromptError(f"{path} is not UTF-8 text (byte {exc.start}); re-save it as UTF-8 JSONL") from None
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            raise PromptError(f"{path}:{number} is not valid JSON; each line must be an object with `prompt` or `turns`") from None
        text = row.get("prompt") if isinstance(row, dict) else None
        if text is None and isinstance(row, dict) and isinstance(row.get("turns"), list) and len(row["turns"]) > turn:
            text = row["turns"][turn]
        if not isinstance(text, str) or not text.strip():
            raise PromptError(f"{path}:{number} has no non-empty `prompt` or `turns[{turn}]`; fix or remove that line")
        prediction = row.get("prediction", "")
        if not isinstance(prediction, str):
            raise PromptError(f"{path}:{number} has a `prediction` that is not a string; give the expected answer's "
                              "text or remove it")
        prompts.append(Prompt(str(row.get("question_id", row.get("id", number))), str(row.get("category", "prompt")), text,
                              prediction))
    if not prompts:
        raise PromptError(f"{path} holds no prompts; add lines with `prompt` or `turns`")
    return prompts


def is_calibration(prompt: Prompt) -> bool:
    return prompt.prompt_id.isdigit() and int(prompt.prompt_id) % CALIBRATION_MODULUS == 0


def spec_bench_split(split: str) -> list[Prompt]:
    """``calibration`` or ``evaluation`` prompts of Spec-Bench (first turns)."""
    prompts = read_prompts(spec_bench_path())
    if split == "calibration":
        return [p for p in prompts if is_calibration(p)]
    if split == "evaluation":
        return [p for p in prompts if not is_calibration(p)]
    raise PromptError(f"unknown split {split!r}; use calibration or evaluation")


PROFILE_PROMPTS = 40  # calibration prompts `specplan profile` measures on: the stratified first 40
QUICK_PROMPTS = 13  # the same with --quick


def profile_prompts(limit: int) -> list[Prompt]:
    """The calibration prompts ``specplan profile`` measures on (``--quick`` takes the first :data:`QUICK_PROMPTS`)."""
    return stratified(spec_bench_split("calibration"), limit)


def drafter_training_prompts(limit: int) -> list[Prompt]:
    """Up to ``limit`` calibration prompts a distilled drafter may train on, spread over
    categories: every calibration prompt but the :data:`PROFILE_PROMPTS` that ``specplan
    profile`` measures on, so that a profile measures a distilled drafter on text it never saw."""
    measured = {prompt.prompt_id for prompt in profile_prompts(PROFILE_PROMPTS)}
    return stratified([p for p in spec_bench_split("calibration") if p.prompt_id not in measured], limit)


def stratified(prompts: list[Prompt], limit: int) -> list[Prompt]:
    """Up to ``limit`` prompts, round-robin over categories so that every category appears."""
    by_category: dict[str, list[Prompt]] = defaultdict(list)
    for prompt in prompts:
        by_category[prompt.category].append(prompt)
    chosen: list[Prompt] = []
    queues = list(by_category.values())
    index = 0
    while len(chosen) < limit and any(index < len(queue) for queue in queues):
        for queue in queues:
            if index < len(queue) and len(chosen) < limit:
                chosen.append(queue[index])
        index += 1
    return chosen


MIN_HELD_OUT_FILE = 4  # prompts a user's file needs before half of it is held out of calibration


def held_out_split(prompts: list[Prompt]) -> tuple[list[Prompt], list[Prompt]]:
    """(calibration, held out) of a user's prompts: within each category, in file order, every second
    prompt is held out, so both halves cover every category of two prompts or more; a file of fewer
    than ``MIN_HELD_OUT_FILE`` prompts is all calibration. ``specplan profile --prompts`` calibrates on
    the first half and ``specplan bench --prompts FILE --held-out`` measures the second.

    >>> rows = [Prompt(str(i), "code" if i < 4 else "chat", "x") for i in range(6)]
    >>> [[p.prompt_id for p in part] for part in held_out_split(rows)]
    [['0', '2', '4'], ['1', '3', '5']]
    """
    if len(prompts) < MIN_HELD_OUT_FILE:
        return list(prompts), []
    seen: dict[str, int] = defaultdict(int)
    calibration, held_out = [], []
    for prompt in prompts:
        (held_out if seen[prompt.category] % 2 else calibration).append(prompt)
        seen[prompt.category] += 1
    return calibration, held_out
