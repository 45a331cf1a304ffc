"""Weight repacking without AMX (runtime/llama_cpp_repack.py): the weights CPU_REPACK repacks are placed on
it by name, the model loads and decodes, and its greedy tokens are the unrepacked model's (the repacked
kernels sum in another order: near-ties may part, docs/backends.md)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from specplan.core.errors import SpecplanError
from specplan.runtime.llama_cpp_repack import REPACKED_TYPES, gguf_weights, name_patterns, repacked_weights

PROMPT = b"The three primary colours of light are red, green and blue. The three primary colours of paint are"


@pytest.fixture(scope="module")
def q4_0_gguf(tmp_path_factory):
    """The default model requantized to Q4_0, a type CPU_REPACK repacks (the default's Q4_1 it does not)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from specplan.models.load import default_gguf_path

    try:
        source = default_gguf_path()
    except SpecplanError as error:
        pytest.skip(str(error))
    target = tmp_path_factory.mktemp("repack") / "smollm2-q4_0.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.allow_requantize, params.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, True, 2
    assert llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params)) == 0
    return target


def greedy(llama_cpp, model, steps: int) -> tuple[list[int], list[np.ndarray]]:
    """``steps`` greedy tokens after PROMPT, one-token decodes on one thread, and each step's logits."""
    from specplan.runtime.llama_cpp_session import context_params

    context = llama_cpp.llama_init_from_model(model, context_params(llama_cpp, 256, 1, 1, exact=False))
    vocab = llama_cpp.llama_model_get_vocab(model)
    size = llama_cpp.llama_vocab_n_tokens(vocab)
    buffer = (llama_cpp.llama_token * 64)()
    tokens = list(buffer[:llama_cpp.llama_tokenize(vocab, PROMPT, len(PROMPT), buffer, 64, True, False)])
    feed = (llama_cpp.llama_token * len(tokens))(*tokens)  # the batch points into it: kept referenced
    batch = llama_cpp.llama_batch_get_one(feed, len(tokens))
    answer, rows = [], []
    try:
        for _ in range(steps):
            assert llama_cpp.llama_decode(context, batch) == 0
            row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(context, -1), shape=(size,)).copy()
            rows.append(row)
            answer.append(int(row.argmax()))
            feed = (llama_cpp.llama_token * 1)(answer[-1])
            batch = llama_cpp.llama_batch_get_one(feed, 1)
    finally:
        llama_cpp.llama_free(context)
    return answer, rows


def test_only_matrices_the_repacked_kernels_serve_are_placed(q4_0_gguf):
    weights = gguf_weights(q4_0_gguf)
    names = repacked_weights(weights)
    kinds = {name: kind for name, kind, _ in weights}
    assert names and all(kinds[name] in REPACKED_TYPES for name in names)
    assert "token_embd.weight" not in names  # read by row lookups, which the repacked layout does not serve
    import re

    patterns = [re.compile(pattern) for pattern in name_patterns(names)]
    matched = {name for name, _, _ in weights if any(pattern.search(name) for pattern in patterns)}
    assert matched == set(names) and len(patterns) < len(names)


def test_a_model_repacked_without_amx_decodes_as_the_unrepacked_one(q4_0_gguf):
    import llama_cpp

    from specplan.runtime.llama_cpp_session import _prepare_backend, load_model

    _prepare_backend(llama_cpp, verbose=False)
    plain = load_model(llama_cpp, q4_0_gguf, exact=False, repack=False)
    repacked = load_model(llama_cpp, q4_0_gguf, exact=False, repack=True, without_amx=True)
    try:
        want, want_rows = greedy(llama_cpp, plain, 12)
        got, got_rows = greedy(llama_cpp, repacked, 12)
    finally:
        llama_cpp.llama_model_free(plain), llama_cpp.llama_model_free(repacked)
    parted = next((step for step, (a, b) in enumerate(zip(want, got)) if a != b), None)
    if parted is not None:  # a near-tie: the unrepacked model's top two within the kernels' rounding
        top = np.sort(want_rows[parted])[-2:]
        assert top[1] - top[0] < 0.05, f"step {parted}: top-2 gap {top[1] - top[0]:.4f}"
    difference = np.abs(got_rows[0] - want_rows[0])
    assert difference.max() > 0  # the repacked kernels ran: they sum in another order than the plain ones
    assert difference.mean() < 0.2  # on the same weights (the logits span about 30)
