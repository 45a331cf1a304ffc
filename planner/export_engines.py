"""What each serving engine can express, and its own configuration text for one stage.

Every field name below was checked against the engine's current source or documentation
with the library's search tool on 2026-11-22; the comment next to each says where.

- vLLM: ``speculative_config`` (``vllm/config/speculative.py``, class ``SpeculativeConfig``,
  vllm-project/vllm at 002e77c1f0ef): ``method`` (``ngram``, ``draft_model``, ``eagle``,
  ``eagle3``, ...), ``num_speculative_tokens``, ``model``, ``prompt_lookup_max``,
  ``prompt_lookup_min``. One drafter, a chain of draft tokens; no trees or hierarchies.
- SGLang: server flags (``docs/advanced_features/server_arguments.md``, sgl-project/sglang at
  b36e8e198b71, sections "Speculative decoding" and "Ngram speculative decoding"):
  ``--speculative-algorithm`` (``EAGLE``, ``EAGLE3``, ``NEXTN``, ``STANDALONE``, ``NGRAM``),
  ``--speculative-draft-model-path``, ``--speculative-num-steps``, ``--speculative-eagle-topk``,
  ``--speculative-num-draft-tokens`` (tokens verified per step, the root included: with topk 1
  SGLang sets it to num_steps + 1, ``server_args.py``; ``ngram_worker.py`` builds a
  draft_token_num x draft_token_num tree mask whose first row is the last committed token),
  ``--speculative-ngram-min-match-window-size``, ``--speculative-ngram-max-match-window-size``,
  ``--speculative-ngram-max-bfs-breadth``. Trees of depth ``num_steps`` with ``topk`` children.
- transformers 5.23 (installed here; ``transformers/generation/configuration_utils.py``):
  generate() kwargs ``assistant_model``, ``prompt_lookup_num_tokens``,
  ``max_matching_ngram_size``, ``assistant_early_exit`` (the first K layers and the LM head as
  drafter: our ``layerskip:K``); ``num_assistant_tokens``, ``num_assistant_tokens_schedule``,
  ``assistant_confidence_threshold`` are read from the *assistant's* generation_config
  (``candidate_generator.py``, AssistedCandidateGenerator.__init__), so they are printed apart.
- llama.cpp server (``tools/server/README.md``, ggml-org/llama.cpp at 00dc8057ab28, section
  "Server-specific params"): ``--spec-type`` (``draft-simple``, ``ngram-simple``, ...),
  ``--spec-draft-model`` (alias ``-md``), ``--spec-draft-n-max``, ``--spec-draft-n-min``,
  ``--spec-draft-p-min`` (alias ``--draft-p-min``), ``--spec-ngram-simple-size-n``,
  ``--spec-ngram-simple-size-m``. The older ``--draft-max`` / ``--draft-min`` are listed there as
  "the argument has been removed"; we print the current names.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

from specplan.core.drafter_spec import DrafterSpec, parse_drafter_spec
from specplan.core.errors import DrafterSpecError
from specplan.core.plan import Stage


@dataclass(frozen=True)
class EngineSupport:
    """What an engine runs: stage shapes, drafter kinds (specplan SPEC kinds), output format."""

    name: str
    shapes: tuple[str, ...]
    drafter_kinds: tuple[str, ...]  # "layerskip" means the first-K-layers form only
    output: str  # json | flags

    def expresses(self, source: str) -> tuple[bool, str]:
        """Whether a drafter SPEC (e.g. ``ngram:3``) maps onto one of the engine's methods, and why not."""
        try:
            spec = parse_drafter_spec(source)
        except DrafterSpecError:
            return False, f"{source!r} is not a drafter spec this version knows"
        if spec.kind not in self.drafter_kinds:
            return False, f"{self.name} has no method for {spec.kind} drafters"
        if spec.kind == "layerskip" and "," in spec.argument:
            return False, f"{self.name} early exit keeps the first K layers, not the set {spec.argument}"
        return True, ""


ENGINES = {
    "vllm": EngineSupport("vllm", ("sequence",), ("ngram", "model"), "json"),
    "sglang": EngineSupport("sglang", ("sequence", "tree"), ("ngram", "model"), "flags"),
    "transformers": EngineSupport("transformers", ("sequence",), ("ngram", "model", "layerskip"), "json"),
    "llama.cpp": EngineSupport("llama.cpp", ("sequence",), ("ngram", "model"), "flags"),
}


def _tree_numbers(stage: Stage) -> tuple[int, int, int]:
    """(steps = depth, topk = most children of a node, draft tokens = nodes incl. the root)."""
    shape = stage.shape
    if shape.kind == "sequence":
        return shape.gamma, 1, shape.gamma + 1
    parents = shape.parents
    if not parents:
        return shape.depth, 1, shape.budget
    children = [0] * len(parents)
    depth = [0] * len(parents)
    for node, parent in enumerate(parents[1:], start=1):
        children[parent] += 1
        depth[node] = depth[parent] + 1
    return max(depth), max(children), len(parents)


def render_vllm(stage: Stage, spec: DrafterSpec) -> str:
    """JSON for vLLM's ``speculative_config`` (``--speculative-config`` / ``LLM(speculative_config=)``)."""
    gamma = stage.shape.gamma
    if spec.kind == "ngram":
        # SpeculativeConfig.method / num_speculative_tokens / prompt_lookup_max / prompt_lookup_min
        # (vllm/config/speculative.py): our ngram:N tries n-grams N..1, most recent match first.
        config = {"method": "ngram", "num_speculative_tokens": gamma,
                  "prompt_lookup_max": int(spec.argument), "prompt_lookup_min": 1}
    else:
        # SpeculativeConfig.model: "The name of the draft model, eagle head, ..."
        config = {"method": "draft_model", "model": spec.argument, "num_speculative_tokens": gamma}
    return json.dumps(config)


def render_sglang(stage: Stage, spec: DrafterSpec) -> str:
    """``sglang.launch_server`` flags (server_arguments.md, "Speculative decoding")."""
    steps, topk, draft_tokens = _tree_numbers(stage)
    if spec.kind == "ngram":
        flags = ["--speculative-algorithm", "NGRAM",
                 "--speculative-num-draft-tokens", str(draft_tokens),
                 "--speculative-ngram-min-match-window-size", "1",
                 "--speculative-ngram-max-match-window-size", spec.argument,
                 "--speculative-ngram-max-bfs-breadth", str(topk)]
    else:
        flags = ["--speculative-algorithm", "STANDALONE",
                 "--speculative-draft-model-path", spec.argument,
                 "--speculative-num-steps", str(steps),
                 "--speculative-eagle-topk", str(topk),
                 "--speculative-num-draft-tokens", str(draft_tokens)]
    return shlex.join(flags)


def render_transformers(stage: Stage, spec: DrafterSpec) -> str:
    """JSON: ``generate_kwargs`` for ``model.generate(**kwargs)`` and, for model drafters, the
    fields to set on the drafter's ``generation_config`` (``assistant_generation_config``;
    for ``assistant_early_exit`` the drafter is the target itself)."""
    gamma = stage.shape.gamma
    if spec.kind == "ngram":
        # PromptLookupCandidateGenerator reads these from the call's generation config.
        return json.dumps({"generate_kwargs": {"prompt_lookup_num_tokens": gamma,
                                               "max_matching_ngram_size": int(spec.argument)}})
    kwargs = {"assistant_early_exit": int(spec.argument)} if spec.kind == "layerskip" \
        else {"assistant_model": spec.argument}
    # A fixed chain: constant schedule, no confidence cut (ConfidenceCriteria only when > 0).
    assistant = {"num_assistant_tokens": gamma, "num_assistant_tokens_schedule": "constant",
                 "assistant_confidence_threshold": 0.0}
    return json.dumps({"generate_kwargs": kwargs, "assistant_generation_config": assistant})


def render_llama_cpp(stage: Stage, spec: DrafterSpec) -> str:
    """``llama-server`` flags (tools/server/README.md, "Server-specific params")."""
    gamma = stage.shape.gamma
    if spec.kind == "ngram":
        flags = ["--spec-type", "ngram-simple",
                 "--spec-ngram-simple-size-n", spec.argument,
                 "--spec-ngram-simple-size-m", str(gamma)]
    else:
        # p-min 0: never cut a draft short, the planner costs a fixed chain of gamma tokens.
        flags = ["--spec-type", "draft-simple", "--spec-draft-model", spec.argument,
                 "--spec-draft-n-max", str(gamma), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"]
    return shlex.join(flags)


RENDERERS = {"vllm": render_vllm, "sglang": render_sglang, "transformers": render_transformers,
             "llama.cpp": render_llama_cpp}
PLAIN = {"vllm": "null", "sglang": "", "transformers": json.dumps({"generate_kwargs": {}}), "llama.cpp": ""}


def render(engine: str, stage: Stage | None, source: str) -> str:
    """The engine's configuration for ``stage`` drafted by SPEC ``source`` (plain decoding: none)."""
    if stage is None:
        return PLAIN[engine]
    return RENDERERS[engine](stage, parse_drafter_spec(source))
