"""Workloads: the prompt sets a profile calibrates on and a bench evaluates on, each split in code
into a calibration part and a held-out evaluation part (never the same prompt in both).

- ``spec-bench``: Spec-Bench's first turns (arXiv 2401.07851; question_id divisible by 4: calibration).
- ``humaneval``: HumanEval's 164 Python problems (arXiv 2107.03374, MIT; task number divisible
  by 4: calibration), asked of an instruct model as "complete this function".
"""

from __future__ import annotations

import gzip
import importlib.resources
import json

from specplan.core.errors import PromptError
from specplan.core.prompts import CALIBRATION_MODULUS, Prompt, spec_bench_split

WORKLOADS = ("spec-bench", "humaneval")
HUMANEVAL_RESOURCE = "data/humaneval/HumanEval.jsonl.gz"
HUMANEVAL_INSTRUCTION = "Complete this Python function. Reply with the whole function in one Python code block.\n\n"


def humaneval_prompts() -> list[Prompt]:
    """Every HumanEval task as a prompt (``prompt_id`` = its task number, category ``code``)."""
    resource = importlib.resources.files("specplan.core").joinpath(HUMANEVAL_RESOURCE)
    with resource.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return [Prompt(row["task_id"].split("/")[-1], "code", f"{HUMANEVAL_INSTRUCTION}```python\n{row['prompt']}```")
            for row in rows]


def humaneval_split(split: str) -> list[Prompt]:
    """``calibration`` (task number divisible by 4) or ``evaluation`` (the rest) HumanEval prompts."""
    prompts = humaneval_prompts()
    if split == "calibration":
        return [p for p in prompts if int(p.prompt_id) % CALIBRATION_MODULUS == 0]
    if split == "evaluation":
        return [p for p in prompts if int(p.prompt_id) % CALIBRATION_MODULUS != 0]
    raise PromptError(f"unknown split {split!r}; use calibration or evaluation")


def workload_split(workload: str, split: str) -> list[Prompt]:
    """The ``split`` part of ``workload`` (one of :data:`WORKLOADS`)."""
    if workload == "spec-bench":
        return spec_bench_split(split)
    if workload == "humaneval":
        return humaneval_split(split)
    raise PromptError(f"unknown workload {workload!r}; use one of {', '.join(WORKLOADS)}")
