"""Export a plan to a serving engine (vLLM, SGLang, transformers, llama.cpp, TensorRT-LLM): re-solve the profile
under what the engine can express and print the command that starts it (docs/planner-math.md,
section 10; docs/exports.md).

- :mod:`.plan` ``export_plan`` (the restricted re-solve and its loss) and ``describe``.
- :mod:`.engines` what each engine runs; :mod:`.models` the names an engine knows a model by.
- :mod:`.commands` the engine's command line; :mod:`.notes` the notes printed with it.
- :mod:`.schedule` a per-batch schedule in an engine's terms; :mod:`.pasted` what ``specplan
  export`` prints.
"""

from .plan import ExportResult, describe, engine_support, export_plan

__all__ = ["ExportResult", "describe", "engine_support", "export_plan"]
