"""Weight repacking without AMX, on a CPU whose AMX repacking crashes (docs/backends.md, "AMX").

llama.cpp repacks quantized weights for its CPU kernels through "extra buffer types": on a CPU with
AMX the ``AMX`` type first, then ``CPU_REPACK`` (rows interleaved in blocks of 8 for the AVX2 and
AVX-512 kernels). The AMX type crashes on the Xeon this project measures on, and llama.cpp's one
switch, ``use_extra_bufts`` (llama-server's ``--no-repack``), turns both types off. Here each weight
that ``CPU_REPACK`` repacks on x86 is placed on that buffer type by name, through the model's
``tensor_buft_overrides`` (llama-server's ``-ot`` names only a device's default buffer type, so no
llama-server flag reaches it); every other weight stays as the file has it.

Which weights: those llama.cpp's ``ggml_repack_get_optimal_repack_type`` repacks with AVX2 (every
CPU with AMX has it): Q4_0, Q4_K and IQ4_NL matrices with a row count divisible by 8, read by a
matrix product (the blocks' weights and the output matrix; the token embedding is read by row
lookups, which the repacked layout does not serve). A weight placed on ``CPU_REPACK`` that it cannot
repack would abort the load, so the list is kept to these.

Measured on the 2-core Xeon with AMX (2026-12-01, Qwen2.5-Coder-1.5B Q4_K_M, 2 threads, 216 cached
tokens, medians, ``measurements/wide_verify.py --model qwen2.5-coder-1.5b --context 216``; docs/backends.md,
"AMX"): a one-token decode 69.9 ms against 74.4 unrepacked, a 4-token verify 114 against 168, 8 tokens 205
against 272, 64 tokens 812 against 641 (where the session's unrepacked wide copy verifies:
runtime/llama_cpp_wide.py).
"""

from __future__ import annotations

import ctypes
import functools
import re
from collections import defaultdict
from pathlib import Path

REPACKED_TYPES = ("Q4_0", "Q4_K", "IQ4_NL")  # x86 types CPU_REPACK repacks with AVX2 (llama.cpp's repack.cpp)
ROW_BLOCK = 8  # rows interleaved per block; a matrix whose row count it does not divide stays as it is
BUFFER_TYPE = "CPU_REPACK"
_LAYER = re.compile(r"^blk\.(\d+)\.(.+)$")


class Override(ctypes.Structure):
    """llama.cpp's ``llama_model_tensor_buft_override``: weights whose name matches ``pattern`` go to ``buft``."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def repacked_weights(tensors: list[tuple[str, str, int]]) -> list[str]:
    """Names, of ``(name, ggml type name, row count)`` triples, of the matrices CPU_REPACK repacks (module docstring).

    >>> repacked_weights([("token_embd.weight", "Q4_K", 151936), ("blk.0.ffn_up.weight", "Q4_K", 8960),
    ...                   ("blk.0.ffn_down.weight", "Q6_K", 1536), ("blk.0.attn_k.weight", "Q4_0", 250),
    ...                   ("output.weight", "Q4_0", 49152), ("blk.0.attn_norm.weight", "F32", 1)])
    ['blk.0.ffn_up.weight', 'output.weight']
    """
    return [name for name, kind, rows in tensors
            if kind in REPACKED_TYPES and rows % ROW_BLOCK == 0 and (name.startswith("blk.") or name == "output.weight")]


def name_patterns(names: list[str]) -> list[str]:
    """Regular expressions matching exactly ``names``, one per weight kind across layers (llama.cpp compiles
    every pattern for every weight it loads, so a few alternations rather than one pattern a weight).

    >>> name_patterns(["blk.0.ffn_up.weight", "blk.2.ffn_up.weight", "blk.1.attn_k.weight", "output.weight"])
    ['^blk\\\\.(0|2)\\\\.ffn_up\\\\.weight$', '^blk\\\\.(1)\\\\.attn_k\\\\.weight$', '^output\\\\.weight$']
    """
    layers: dict[str, list[str]] = defaultdict(list)
    others = []
    for name in names:
        match = _LAYER.match(name)
        if match:
            layers[match.group(2)].append(match.group(1))
        else:
            others.append(name)
    patterns = [rf"^blk\.({'|'.join(numbers)})\.{re.escape(kind)}$" for kind, numbers in layers.items()]
    return patterns + [f"^{re.escape(name)}$" for name in others]


class _GgufParams(ctypes.Structure):
    """ggml's ``gguf_init_params``: header only, and a ggml context of the tensors' shapes."""

    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.POINTER(ctypes.c_void_p))]


@functools.cache
def _ggml():
    """llama-cpp-python's ggml library with the signatures used here, set once a process."""
    from llama_cpp._ggml import libggml

    pointer, text, count = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64
    signatures = {"gguf_init_from_file": ([text, _GgufParams], pointer), "gguf_free": ([pointer], None),
                  "gguf_get_n_tensors": ([pointer], count), "gguf_get_tensor_name": ([pointer, count], text),
                  "gguf_get_tensor_type": ([pointer, count], ctypes.c_int), "ggml_type_name": ([ctypes.c_int], text),
                  "ggml_get_tensor": ([pointer, text], pointer), "ggml_nrows": ([pointer], count),
                  "ggml_free": ([pointer], None), "ggml_backend_dev_by_type": ([ctypes.c_int], pointer),
                  "ggml_backend_dev_backend_reg": ([pointer], pointer),
                  "ggml_backend_reg_get_proc_address": ([pointer, text], pointer),
                  "ggml_backend_buft_name": ([pointer], text)}
    for name, (arguments, result) in signatures.items():
        function = getattr(libggml, name)
        function.argtypes, function.restype = arguments, result
    return libggml


def gguf_weights(path: str | Path) -> list[tuple[str, str, int]]:
    """``(name, ggml type name, row count)`` of every weight in the GGUF file at ``path``, read from its header by
    llama.cpp's own GGUF reader (milliseconds; the ``gguf`` package's reader parses every metadata array, 8 s
    for the 1.5B's vocabulary)."""
    ggml = _ggml()
    shapes = ctypes.c_void_p()
    header = ggml.gguf_init_from_file(str(path).encode(), _GgufParams(True, ctypes.pointer(shapes)))
    if not header:
        return []
    try:
        names = [ggml.gguf_get_tensor_name(header, index) for index in range(ggml.gguf_get_n_tensors(header))]
        return [(name.decode(), ggml.ggml_type_name(ggml.gguf_get_tensor_type(header, index)).decode().upper(),
                 ggml.ggml_nrows(ggml.ggml_get_tensor(shapes, name))) for index, name in enumerate(names)]
    finally:
        ggml.gguf_free(header)
        ggml.ggml_free(shapes)


@functools.cache
def repack_buffer_type() -> int | None:
    """The address of llama.cpp's CPU_REPACK buffer type (None: this build has none); looked up once a process."""
    ggml = _ggml()
    device = ggml.ggml_backend_dev_by_type(0)  # GGML_BACKEND_DEVICE_TYPE_CPU
    address = ggml.ggml_backend_reg_get_proc_address(ggml.ggml_backend_dev_backend_reg(device),
                                                     b"ggml_backend_dev_get_extra_bufts") if device else None
    if not address:
        return None
    extra = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(address)(device)
    index = 0
    while extra and extra[index]:
        if ggml.ggml_backend_buft_name(extra[index]).decode() == BUFFER_TYPE:
            return extra[index]
        index += 1
    return None


def repacks_some_weight(path: str | Path) -> bool:
    """Whether llama.cpp repacks any weight of the GGUF file at ``path`` on this CPU (a build with the CPU_REPACK
    buffer type, and a weight of a type it repacks: a Q4_1 file such as SmolLM2-135M's has none, so a repacked and
    an unrepacked load of it run the same kernels)."""
    return repack_buffer_type() is not None and bool(repacked_weights(gguf_weights(path)))


def repack_overrides(path: str | Path) -> ctypes.Array | None:
    """The NULL-terminated override array that puts the GGUF file's repackable weights on CPU_REPACK (None:
    none to repack, or no such buffer type). The caller keeps it alive until the model is loaded."""
    buffer_type = repack_buffer_type()
    names = repacked_weights(gguf_weights(path)) if buffer_type else []
    if not names:
        return None
    items = [Override(pattern.encode(), buffer_type) for pattern in name_patterns(names)] + [Override(None, None)]
    return (Override * len(items))(*items)
