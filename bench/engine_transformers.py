"""``specplan bench PLAN --engine transformers``: the exported transformers setting, measured.

The plan's profile is exported for transformers (:func:`specplan.planner.export.export_plan`);
the setting its snippet prints runs through transformers' own ``generate`` on the target as the
profile loads it (source, dtype, 4-bit variant), beside plain greedy ``generate`` on the same
prompts, alternating prompt by prompt (:mod:`specplan.bench.engine_rows`):

- an n-gram drafter: prompt lookup, ``prompt_lookup_num_tokens`` = gamma and
  ``max_matching_ngram_size`` = N (Saxena 2023);
- a layer-skip drafter: ``assistant_early_exit`` = K with the target's
  ``generation_config.num_assistant_tokens`` = gamma (the target is its own assistant);
- a model drafter: the drafter loaded as a model object, ``assistant_model=`` it, with its own
  ``generation_config.num_assistant_tokens`` = gamma (constant schedule, no confidence cut);
- plain decoding only, when the export chose none.

Assisted generation is Leviathan et al.'s greedy verification (arXiv 2211.17192), so its output
should equal plain greedy ``generate``'s: checked per prompt, with the target's top-2 logit gap
where they part (planner-math.md section 5; a near-tie in bfloat16, a failure in float32).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specplan.bench.engine_rows import EngineRow
from specplan.bench.metrics import lossless_verdict
from specplan.bench.peers import GenerateMethod, assistant_with_gamma
from specplan.core.drafter_spec import parse_drafter_spec
from specplan.models.load import LoadedModel
from specplan.runtime.build import build_drafter
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.lossless import check_lossless, divergence_gap

WARM_UP_TOKENS = 4  # the first generate() call of a process allocates and picks kernels: untimed


def transformers_methods(stage, source: str, target: LoadedModel, device: torch.device,
                         eos: set[int]) -> list[GenerateMethod]:
    """Plain greedy ``generate`` and the exported setting (only plain when the export has no stage)."""
    greedy = SamplingConfig()
    plain = GenerateMethod("transformers", "plain", target.model, device, eos, greedy,
                           "transformers plain greedy generate", prefill_from_hooks=True)
    if stage is None:
        return [plain]
    gamma = stage.shape.gamma
    spec = parse_drafter_spec(source)
    if spec.kind == "ngram":
        return [plain, GenerateMethod("exported", "engine", target.model, device, eos, greedy,
                                      f"transformers prompt lookup, prompt_lookup_num_tokens {gamma}, "
                                      f"max_matching_ngram_size {spec.ngram_sizes[0]}", prefill_from_hooks=True,
                                      prompt_lookup_num_tokens=gamma, max_matching_ngram_size=spec.ngram_sizes[0])]
    if spec.kind == "layerskip":
        assistant_with_gamma(target.model, target.model, gamma)  # early exit reads the target's own config
        exported = GenerateMethod("exported", "engine", target.model, device, eos, greedy,
                                  f"transformers early exit, assistant_early_exit {spec.argument}, "
                                  f"num_assistant_tokens {gamma}", prefill_from_hooks=True,
                                  assistant_early_exit=int(spec.argument))
        exported.settings["num_assistant_tokens"] = gamma
        return [plain, exported]
    network = build_drafter(spec, target, device).model  # a model: drafter, loaded in the target's dtype
    assistant = assistant_with_gamma(network, target.model, gamma)
    return [plain, GenerateMethod("exported", "engine", target.model, device, eos, greedy,
                                  f"transformers assisted generation, assistant {spec.argument}, "
                                  f"num_assistant_tokens {gamma}", assistant=assistant, prefill_from_hooks=True)]


def lossless_line(rows: Sequence[EngineRow], prompts: Sequence[list[int]], target: LoadedModel) -> tuple[bool, str]:
    """(ok, verdict) of the exported outputs against plain greedy's, prompt by prompt."""
    if len(rows) < 2:
        return True, "plain decoding only: nothing to compare"
    checks = []
    for prompt_ids, plain, exported in zip(prompts, rows[0].outputs, rows[-1].outputs):
        checks.append(check_lossless(plain, exported,
                                     lambda index: divergence_gap(target.model, prompt_ids, plain, index)))
    return lossless_verdict(checks, target.dtype)
