"""llama.cpp as a bench peer, through llama-cpp-python, on the GGUF file the target was loaded
from (the ``default`` model's Q4_1 file, a fetched model's Q4_K_M file, a ``.gguf`` path):

- ``llama.cpp``: llama.cpp's own decoding loop (``Llama.generate``); at temperature 0 its greedy
  sampler (``temp 0``, ``top_k 1``), else temperature and top-p with the bench's seed;
- ``llama.cpp-lookup``: the same loop with llama-cpp-python's ``LlamaPromptLookupDecoding`` as
  the draft model, ``max_ngram_size`` and ``num_pred_tokens`` set as hf-lookup's
  ``max_matching_ngram_size`` and ``prompt_lookup_num_tokens``
  (:func:`specplan.bench.peers.lookup_settings`).

Both take the bench's prompt ids as they are (the GGUF carries the tokenizer's vocabulary), run
on the CPU with as many threads as torch uses, in a context of the longest prompt plus
max-new-tokens, and prefill every prompt in full (no KV reuse between calls). llama.cpp computes
in the GGUF's quantized format with its own kernels, not in the target's dequantised weights, so
its output is not expected to be token-identical to the reference: the lossless check reports
where it parts (method kind ``engine``) and does not require it.

A forward is one ``Llama.eval`` call: the prompt, then one token, or a token and its drafts.
With a draft model llama-cpp-python keeps the logits of every position, so the lookup peer's
forwards include copying them (its cost as a user meets it).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from specplan.runtime.llama_cpp_session import high_level_llama
from specplan.bench.methods import ForwardLog
from specplan.bench.metrics import Measurement
from specplan.core.errors import BackendMissingError
from specplan.runtime.drafters.base import SamplingConfig

LLAMA_CPP_PEERS = ("llama.cpp", "llama.cpp-lookup")
# llama.cpp pads its context to a multiple of 256; llama-cpp-python sizes its token buffer by the
# n_ctx asked for but caps the drafts by the padded one, so a lookup could overrun an unpadded buffer
CONTEXT_STEP = 256
INSTALL = "pip install 'specplan[llamacpp]' (it compiles llama.cpp from source, ~10 min on 2 cores; docs/guide.md)"


def require_llama_cpp() -> None:
    """Raise BackendMissingError (one line) when llama_cpp cannot be imported."""
    try:
        importlib.import_module("llama_cpp")
    except ImportError:
        raise BackendMissingError(f"the llama.cpp peers need llama-cpp-python: {INSTALL}") from None
    except (OSError, RuntimeError) as error:  # installed, but its shared library does not load
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise BackendMissingError(f"llama-cpp-python is installed but does not load ({first}); {INSTALL}") from None


class TimedDraft:
    """A llama-cpp-python draft model that adds the seconds of every call to ``seconds``."""

    def __init__(self, draft):
        self.draft = draft
        self.seconds = 0.0

    def __call__(self, input_ids, /, **kwargs):
        start = time.perf_counter()
        tokens = self.draft(input_ids, **kwargs)
        self.seconds += time.perf_counter() - start
        return tokens


@contextmanager
def timed_evals(llm) -> Iterator[ForwardLog]:
    """Note every ``llm.eval`` (tokens, seconds) until exit."""
    log = ForwardLog([])
    original = llm.eval

    def evaluate(tokens):
        start = time.perf_counter()
        original(tokens)
        log.calls.append((len(tokens), time.perf_counter() - start))

    llm.eval = evaluate  # an instance attribute shadows the method until we delete it
    try:
        yield log
    finally:
        del llm.eval


class LlamaCppMethod:
    """``Llama.generate`` (with or without a draft model) as a bench method."""

    def __init__(self, name: str, llm, eos_ids: set[int], sampling: SamplingConfig, description: str,
                 settings: dict, draft: TimedDraft | None = None):
        self.name = name
        self.kind = "engine"
        self.llm = llm
        self.eos_ids = set(eos_ids)
        self.sampling = sampling
        self.description = description
        self.settings = settings
        self.draft = draft

    def _sampler(self) -> dict:
        if self.sampling.greedy:
            return {"temp": 0.0, "top_k": 1, "top_p": 1.0, "min_p": 0.0}
        self.llm.set_seed(self.sampling.seed)
        return {"temp": self.sampling.temperature, "top_p": self.sampling.top_p, "top_k": 0, "min_p": 0.0}

    def run(self, prompt_ids: list[int], max_new_tokens: int) -> Measurement:
        sampler = self._sampler()
        self.llm.reset()  # forget the last call's tokens: no prefix reuse, every prompt prefills in full
        drafted = self.draft.seconds if self.draft is not None else 0.0
        tokens: list[int] = []
        with timed_evals(self.llm) as log:
            start = time.perf_counter()
            generator = self.llm.generate(list(prompt_ids), repeat_penalty=1.0, reset=True, **sampler)
            for token in generator:
                tokens.append(int(token))
                if len(tokens) >= max_new_tokens or tokens[-1] in self.eos_ids:
                    break
            generator.close()
            seconds = time.perf_counter() - start
        return Measurement(
            token_ids=tuple(tokens),
            seconds=seconds,
            target_forwards=len(log.calls),  # the prompt's eval yields the first token: every eval commits
            forward_seconds=log.seconds,
            prefill_seconds=log.calls[0][1] if log.calls else None,
            prefill_tokens=1 if log.calls and tokens else 0,  # the prompt's eval yields the first token
            draft_seconds=self.draft.seconds - drafted if self.draft is not None else None,
        )


def build_llamacpp_peers(names: Sequence[str], runner, sampling: SamplingConfig, lookup: tuple[int, int, str],
                         context: int, notes: list[str]) -> list[LlamaCppMethod]:
    """The llama.cpp peers named in ``names`` on the GGUF of ``runner``'s target.

    ``lookup``: (max n-gram, draft length, why) as hf-lookup's; ``context``: the longest prompt
    plus max-new-tokens (rounded up to llama.cpp's step). A target that is not a GGUF file leaves them out with a line in ``notes``.
    """
    wanted = [name for name in LLAMA_CPP_PEERS if name in names]
    if not wanted:
        return []
    require_llama_cpp()
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    from specplan.models.load import gguf_file
    from specplan.runtime.build import eos_ids

    source = runner.profile.target.source
    gguf = gguf_file(source)
    if gguf is None:
        notes.append(f"llama.cpp peers skipped: the target {source!r} is not a GGUF file (profile `default`, a "
                     "fetched model or a .gguf path to compare with llama.cpp on the same weights)")
        return []
    threads = torch.get_num_threads()
    context = -(-context // CONTEXT_STEP) * CONTEXT_STEP
    options = {"model_path": str(gguf), "n_ctx": context, "n_threads": threads, "n_threads_batch": threads,
               "n_gpu_layers": 0, "verbose": False}
    where = f"{gguf.name} on the CPU, {threads} threads, n_ctx {context}"
    eos = eos_ids(runner.target)
    methods = []
    if "llama.cpp" in wanted:
        methods.append(LlamaCppMethod("llama.cpp", high_level_llama(**options), eos, sampling,
                                      f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) decoding, {where}",
                                      {"n_threads": threads, "n_ctx": context}))
    if "llama.cpp-lookup" in wanted:
        size, gamma, why = lookup
        draft = TimedDraft(LlamaPromptLookupDecoding(max_ngram_size=size, num_pred_tokens=gamma))
        # logits_all=True as the draft model implies: llama-cpp-python sizes its logits buffer by the argument
        # (n_batch rows without it), so a prompt longer than n_batch would overrun it
        methods.append(LlamaCppMethod("llama.cpp-lookup", high_level_llama(**options, draft_model=draft, logits_all=True),
                                      eos, sampling,
                                      f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) prompt lookup, "
                                      f"num_pred_tokens {gamma}, max_ngram_size {size} ({why}), {where}",
                                      {"n_threads": threads, "n_ctx": context, "num_pred_tokens": gamma,
                                       "max_ngram_size": size}, draft=draft))
    return methods
