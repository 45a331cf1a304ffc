"""The command (or, for transformers, the Python snippet; for TensorRT-LLM, the YAML file) that
starts an engine with one stage.

Every flag and field written here is in the engine's recorded interface
(``tests/data/engines/``, see :mod:`.engines` for the commits); plain decoding writes
the command with no speculative option at all.
"""

from __future__ import annotations

import json
import shlex
from pathlib import PurePath

import yaml

from specplan.core.drafter_spec import DrafterSpec, parse_drafter_spec
from specplan.core.parents import tree_depth
from specplan.core.plan import Stage

from .engines import eagle_choices, tree_numbers
from .models import ModelNames

PROMPT = "Write a haiku about caches."


def render_vllm(stage: Stage | None, spec: DrafterSpec | None, names: ModelNames) -> str:
    """``vllm serve MODEL --speculative-config '<json>'`` (keys: ``SpeculativeConfig`` fields)."""
    words = ["vllm", "serve", names.name(names.target, "vllm")]
    if stage is None:
        return shlex.join(words)
    gamma = stage.shape.gamma
    if spec.kind == "ngram":
        # our ngram:N:K tries n-grams N..K, the most recent match first
        longest, shortest = spec.ngram_sizes
        config = {"method": "ngram", "num_speculative_tokens": gamma,
                  "prompt_lookup_max": longest, "prompt_lookup_min": shortest}
    elif spec.kind == "cache":  # earlier outputs: vLLM's suffix decoding sizes each draft up to the cap
        config = {"method": "suffix", "num_speculative_tokens": gamma}
    elif spec.kind == "head":  # the EAGLE-3 checkpoint specplan wrote from the head
        config = {"method": "eagle3", "model": names.name(spec.argument, "vllm"), "num_speculative_tokens": gamma}
    else:
        config = {"method": "draft_model", "model": names.name(spec.argument, "vllm"),
                  "num_speculative_tokens": gamma}
    return shlex.join(words + ["--speculative-config", json.dumps(config)])


def render_sglang(stage: Stage | None, spec: DrafterSpec | None, names: ModelNames) -> str:
    """``python -m sglang.launch_server --model-path MODEL`` and the speculative flags."""
    words = ["python", "-m", "sglang.launch_server", "--model-path", names.name(names.target, "sglang")]
    if names.device == "cpu":
        words += ["--device", "cpu"]
    if stage is None:
        return shlex.join(words)
    steps, topk, draft_tokens = tree_numbers(stage)
    if spec.kind == "ngram":
        # the trie's breadth is the tree's widest branching; SGLang derives steps and topk from it
        words += ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(draft_tokens),
                  "--speculative-ngram-max-bfs-breadth", str(topk)]
    else:
        words += ["--speculative-algorithm", "EAGLE3" if spec.kind == "head" else "STANDALONE",
                  "--speculative-draft-model-path", names.name(spec.argument, "sglang"),
                  "--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
                  "--speculative-num-draft-tokens", str(draft_tokens)]
    return shlex.join(words)


def render_llama_cpp(stage: Stage | None, spec: DrafterSpec | None, names: ModelNames) -> str:
    """``llama-server -m TARGET.gguf`` and the ``--spec-*`` flags."""
    words = ["llama-server", "-m", names.name(names.target, "llama.cpp")]
    if stage is None:
        return shlex.join(words)
    gamma = stage.shape.gamma
    if spec.kind == "ngram":
        words += ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(spec.ngram_sizes[0]),
                  "--spec-ngram-simple-size-m", str(gamma)]
    else:
        # p-min 0 and n-min 0: never cut a draft short, the planner costs a fixed chain of gamma tokens
        words += ["--spec-type", "draft-simple", "--spec-draft-model", names.name(spec.argument, "llama.cpp"),
                  "--spec-draft-n-max", str(gamma), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"]
    return shlex.join(words)


def _load_line(variable: str, source: str, names: ModelNames, kind: str = "AutoModelForCausalLM") -> str:
    """``variable = kind.from_pretrained(...)`` for a folder, a hub id or a GGUF file."""
    name = names.name(source, "transformers")
    if name.endswith(".gguf"):
        path = PurePath(name)
        return f"{variable} = {kind}.from_pretrained({str(path.parent)!r}, gguf_file={path.name!r})"
    return f"{variable} = {kind}.from_pretrained({name!r})"


def _chain_settings(owner: str, gamma: int) -> list[str]:
    """A fixed chain of ``gamma`` drafts: constant schedule, no confidence cut."""
    return [f"# read from {owner}.generation_config when generation starts, not from generate()'s arguments",
            f"{owner}.generation_config.num_assistant_tokens = {gamma}",
            f"{owner}.generation_config.num_assistant_tokens_schedule = \"constant\"",
            f"{owner}.generation_config.assistant_confidence_threshold = 0.0"]


def render_transformers(stage: Stage | None, spec: DrafterSpec | None, names: ModelNames) -> str:
    """A Python snippet: load the target (and the assistant model object), then ``generate()``."""
    lines = ["from transformers import AutoModelForCausalLM, AutoTokenizer", "",
             _load_line("tokenizer", names.target, names, "AutoTokenizer"), _load_line("model", names.target, names)]
    arguments = ""
    if stage is not None and spec.kind == "ngram":
        arguments = (f", prompt_lookup_num_tokens={stage.shape.gamma}, "
                     f"max_matching_ngram_size={spec.ngram_sizes[0]}")
    elif stage is not None and spec.kind == "layerskip":
        lines += _chain_settings("model", stage.shape.gamma)  # early exit: the target is its own assistant
        arguments = f", assistant_early_exit={int(spec.argument)}"
    elif stage is not None:
        lines += [_load_line("assistant", spec.argument, names)] + _chain_settings("assistant", stage.shape.gamma)
        arguments = ", assistant_model=assistant"  # a loaded model object: generate() takes no name here
    if stage is not None:
        lines.append("# assisted generation runs one sequence at a time: batch size 1 only")
    lines += ["max_new_tokens = 64",
              f"inputs = tokenizer({PROMPT!r}, return_tensors=\"pt\")",
              f"output = model.generate(**inputs, do_sample=False, max_new_tokens=max_new_tokens{arguments})",
              "print(tokenizer.decode(output[0][inputs[\"input_ids\"].shape[1]:], skip_special_tokens=True))"]
    return "\n".join(lines)


TRTLLM_FILE = "extra.yaml"
FINAL_HIDDEN_STATE = -1  # eagle3_layers_to_capture: the target's final hidden state, the one specplan's heads read


def tensorrt_llm_speculative_config(stage: Stage, spec: DrafterSpec, names: ModelNames) -> dict:
    """TensorRT-LLM's ``speculative_config`` (keys: ``DecodingBaseConfig`` and its subclass's fields)."""
    gamma = stage.shape.gamma
    if spec.kind == "ngram":
        # the longest match only; False, False: the newest match from this request's own tokens, as specplan's lookup
        return {"decoding_type": "NGram", "max_draft_len": gamma, "max_matching_ngram_size": spec.ngram_sizes[0],
                "is_use_oldest": False, "is_public_pool": False}
    if spec.kind == "model":
        return {"decoding_type": "Draft_Target", "max_draft_len": gamma,
                "speculative_model": names.name(spec.argument, "tensorrt-llm")}
    config = {"decoding_type": "Eagle3", "max_draft_len": gamma, "speculative_model": names.name(spec.argument,
              "tensorrt-llm"), "eagle3_layers_to_capture": [FINAL_HIDDEN_STATE]}  # one captured layer: no fc
    if stage.shape.kind == "tree":
        config.update(max_draft_len=tree_depth(stage.shape.parents), eagle_choices=eagle_choices(stage.shape.parents))
    return config


class _ListsOnOneLine(yaml.SafeDumper):
    """Mappings as blocks, lists (``eagle_choices``, ``eagle3_layers_to_capture``) on one line."""


_ListsOnOneLine.add_representer(list, lambda dumper, data: dumper.represent_sequence(
    "tag:yaml.org,2002:seq", data, flow_style=True))


def tensorrt_llm_yaml(document: dict) -> str:
    """``document`` as YAML (``{}`` when empty)."""
    return yaml.dump(document, Dumper=_ListsOnOneLine, sort_keys=False).rstrip("\n") if document else "{}"


def tensorrt_llm_text(model: str, document: dict) -> str:
    """The YAML file ``trtllm-serve --extra_llm_api_options`` reads, the command in its first line (a comment)."""
    start = shlex.join(["trtllm-serve", model, "--extra_llm_api_options", TRTLLM_FILE])
    return f"# save as {TRTLLM_FILE}, then: {start}\n{tensorrt_llm_yaml(document)}"


def render_tensorrt_llm(stage: Stage | None, spec: DrafterSpec | None, names: ModelNames) -> str:
    """The YAML file for ``trtllm-serve MODEL --extra_llm_api_options FILE`` (plain decoding: ``{}``)."""
    document = {} if stage is None else {"speculative_config": tensorrt_llm_speculative_config(stage, spec, names)}
    return tensorrt_llm_text(names.name(names.target, "tensorrt-llm"), document)


RENDERERS = {"vllm": render_vllm, "sglang": render_sglang, "transformers": render_transformers,
             "llama.cpp": render_llama_cpp, "tensorrt-llm": render_tensorrt_llm}


def render(engine: str, stage: Stage | None, source: str, names: ModelNames) -> str:
    """The command that starts ``engine`` with ``stage`` drafted by SPEC ``source`` (None: plain decoding)."""
    spec = parse_drafter_spec(source) if stage is not None else None
    return RENDERERS[engine](stage, spec, names)
