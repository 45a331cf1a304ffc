"""How an engine's command names a model that a profile names by its specplan MODEL source.

specplan's ``default`` model is SmolLM2-135M-Instruct, read from a Q4_1 GGUF and dequantised;
the registered ``qwen2.5-coder-*`` models are Q4_K_M GGUF files. vLLM, SGLang and transformers
are given the authors' Hugging Face repositories of the same models (16-bit weights, so the
acceptance the profile measured on the dequantised GGUF may differ slightly), and so is
TensorRT-LLM (``speculative_model`` takes a checkpoint folder or a hub id); llama.cpp is given the
GGUF file itself. Other sources (a model folder, a hub id, a ``.gguf`` path) are
passed through unchanged. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

HUB_IDS = {
    "default": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "qwen2.5-coder-1.5b": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
    "qwen2.5-coder-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
}
GGUF_FILES = {
    "default": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
HEAD_CHECKPOINT_ENGINES = ("vllm", "sglang", "tensorrt-llm")  # they load the EAGLE-3 checkpoint specplan writes
HUB_NOTE = ("the command names the Hugging Face repository of specplan's {source!r} model (16-bit weights); "
            "the profile measured the dequantised GGUF, so acceptance may differ slightly")


@dataclass(frozen=True)
class ModelNames:
    """The target's specplan source, the device kind, and GGUF paths the caller found on disk."""

    target: str  # the profile's target source: default, a path, a hub id
    device: str = "cpu"  # the profile's device kind: cpu | cuda | ...
    gguf_paths: tuple[tuple[str, str], ...] = ()  # (MODEL source, GGUF file path)
    overrides: tuple[tuple[str, str], ...] = field(default=())  # (MODEL source, the name to print)
    heads: tuple[tuple[str, str], ...] = ()  # (head DIR, its EAGLE-3 checkpoint folder: HEAD_CHECKPOINT_ENGINES)

    def name(self, source: str, engine: str) -> str:
        """What ``engine``'s command calls the model specplan calls ``source``."""
        given = dict(self.overrides)
        if source in given:
            return given[source]
        if engine in HEAD_CHECKPOINT_ENGINES and source in dict(self.heads):
            return dict(self.heads)[source]
        if engine == "llama.cpp":
            return dict(self.gguf_paths).get(source) or GGUF_FILES.get(source, source)
        return HUB_IDS.get(source, source)


def is_gguf(source: str, names: ModelNames) -> bool:
    """Whether llama.cpp can load ``source`` as it is: a ``.gguf`` file or a registered GGUF model."""
    return names.name(source, "llama.cpp").endswith(".gguf")
