"""Workloads: the prompt sets a profile calibrates on and a bench evaluates on, each split in code
into a calibration part and a held-out evaluation part (never the same prompt in both).

- ``spec-bench``: Spec-Bench's first turns (arXiv 2401.07851; question_id divisible by 4: calibration).
- ``humaneval``: HumanEval's 164 Python problems (arXiv 2107.03374, MIT; task number divisible
  by 4: calibration), asked of an instruct model as "complete this function".
- ``humaneval-edit``: edits, where local coding assistants spend their tokens and where drafts
  taken from the text itself are accepted in long runs: each HumanEval task's whole function (its
  prompt and canonical solution, MIT) with one of :data:`EDIT_INSTRUCTIONS` (chosen by task number),
  asked to be reprinted edited; the same split by task number as ``humaneval``. Each prompt's
  ``prediction`` is that function's code block, as an editor sends it (OpenAI's Predicted Outputs;
  measurements/serve_http.py sends the same text), which a profile replays as a drafter.
"""

from __future__ import annotations

import gzip
import importlib.resources
import json

from specplan.core.errors import PromptError
from specplan.core.prompts import CALIBRATION_MODULUS, Prompt, spec_bench_split

WORKLOADS = ("spec-bench", "humaneval", "humaneval-edit")
HUMANEVAL_RESOURCE = "data/humaneval/HumanEval.jsonl.gz"
HUMANEVAL_INSTRUCTION = "Complete this Python function. Reply with the whole function in one Python code block.\n\n"


# (category, instruction): the task number picks one, so that every split holds all four
EDIT_INSTRUCTIONS = (
    ("edit-type-hints", "Add type hints to every parameter and the return value of this Python function."),
    ("edit-docstring", "Rewrite the docstring of this Python function in Google style (Args, Returns), "
                       "keeping its examples."),
    ("edit-rename", "Rename the function's local variables to longer, descriptive names."),
    ("edit-comprehension", "Where this Python function builds a list or value in a loop, use a comprehension or a "
                           "built-in instead; keep its behaviour."),
)
EDIT_SUFFIX = " Reply with the whole edited function in one Python code block and nothing else.\n\n"


def _humaneval_rows() -> list[dict]:
    resource = importlib.resources.files("specplan.core").joinpath(HUMANEVAL_RESOURCE)
    with resource.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def humaneval_prompts() -> list[Prompt]:
    """Every HumanEval task as a prompt (``prompt_id`` = its task number, category ``code``)."""
    return [Prompt(row["task_id"].split("/")[-1], "code", f"{HUMANEVAL_INSTRUCTION}```python\n{row['prompt']}```")
            for row in _humaneval_rows()]


def humaneval_edit_prompts() -> list[Prompt]:
    """Every HumanEval task's whole function (prompt + canonical solution) with an edit instruction;
    the category names the edit, and the prediction is the function's code block.

    >>> prompts = humaneval_edit_prompts()
    >>> len(prompts), sorted({p.category for p in prompts})[0], prompts[0].text.count("def ")
    (164, 'edit-comprehension', 1)
    """
    prompts = []
    for row in _humaneval_rows():
        number = int(row["task_id"].split("/")[-1])
        # (task // 4) picks the edit: the split takes task % 4, so both splits hold every edit
        category, instruction = EDIT_INSTRUCTIONS[(number // CALIBRATION_MODULUS) % len(EDIT_INSTRUCTIONS)]
        code = row["prompt"] + row["canonical_solution"]
        block = f"```python\n{code.rstrip()}\n```"  # the code to edit: also the answer's prediction
        prompts.append(Prompt(str(number), category, f"{instruction}{EDIT_SUFFIX}{block}", block))
    return prompts


def humaneval_split(split: str, edit: bool = False) -> list[Prompt]:
    """``calibration`` (task number divisible by 4) or ``evaluation`` (the rest) HumanEval prompts
    (``edit``: the humaneval-edit prompts of those tasks)."""
    prompts = humaneval_edit_prompts() if edit else humaneval_prompts()
    if split == "calibration":
        return [p for p in prompts if int(p.prompt_id) % CALIBRATION_MODULUS == 0]
    if split == "evaluation":
        return [p for p in prompts if int(p.prompt_id) % CALIBRATION_MODULUS != 0]
    raise PromptError(f"unknown split {split!r}; use calibration or evaluation")


def workload_split(workload: str, split: str) -> list[Prompt]:
    """The ``split`` part of ``workload`` (one of :data:`WORKLOADS`)."""
    if workload == "spec-bench":
        return spec_bench_split(split)
    if workload in ("humaneval", "humaneval-edit"):
        return humaneval_split(split, edit=workload == "humaneval-edit")
    raise PromptError(f"unknown workload {workload!r}; use one of {', '.join(WORKLOADS)}")
