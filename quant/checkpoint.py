"""The first verb: make a quantized checkpoint of MODEL once and keep it in the cache.

As in gpt-fast's quantize.py, quantizing (slow, once) and loading for run time (fast, every
time; :mod:`specplan.quant.load`) are separate verbs. The checkpoint is a Hugging Face
directory whose ``config.json`` carries the ``quantization_config`` transformers needs to
rebuild the 4-bit layers, cached under ``$SPECPLAN_CACHE/quantized/<label>-<source key>``:
the key is the 16-bit source's fingerprint, so new source weights mean a new checkpoint.
It is a cache entry (:func:`~specplan.models.cache_entry.open_entry`), in the cache or in a
folder ``-o DIR``: written into a private temporary folder beside its place and renamed there
once whole, with a ``manifest.yaml`` of its files' sizes and digests that every open checks (a
damaged checkpoint is rebuilt, never loaded); processes quantizing the same model take turns on
its lock, and the later ones find it made.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from specplan.core.errors import SpecplanError
from specplan.core.files import read_json_object
from specplan.models.cache_entry import open_entry
from specplan.quant.methods import NF4_BLOCK, QuantMethod, parse_method, pick_group_size

MANIFEST = "specplan-quant.json"  # written last: a directory without it is incomplete


@dataclass(frozen=True)
class QuantizedCheckpoint:
    path: Path  # Hugging Face directory (config.json with quantization_config, safetensors, tokenizer)
    method: QuantMethod  # with the group size actually used
    source: str  # MODEL as the user said it
    source_fingerprint: str  # of the 16-bit weights it was made from
    fingerprint: str  # of this variant: source fingerprint + method label
    seconds: float  # spent quantizing now; 0.0 when it came from the cache


def variant_fingerprint(source_fingerprint: str, label: str) -> str:
    """Identity of a quantized variant, stable across re-quantizations of the same source.

    >>> variant_fingerprint("sha256:ab", "nf4")[:7]
    'sha256:'
    """
    import hashlib

    return "sha256:" + hashlib.sha256(f"{source_fingerprint}|{label}".encode()).hexdigest()[:32]


def input_widths(source_dir: str) -> list[int]:
    """In-features of the decoder's Linear layers (hidden, intermediate, heads x head_dim)."""
    config = json.loads((Path(source_dir) / "config.json").read_text())
    heads = config.get("num_attention_heads", 1)
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    return [config["hidden_size"], config["intermediate_size"], heads * head_dim]


def resolve_method(name: str, source_dir: str) -> QuantMethod:
    """``name``'s method, checked against this model's layer widths, with a GPTQ group size
    that divides them. bitsandbytes' CPU path repacks NF4 blocks of 64 along the input
    dimension, so NF4 needs every in-feature count divisible by 64."""
    method = parse_method(name)
    widths = input_widths(source_dir)
    if method.name == "nf4":
        if any(width % NF4_BLOCK for width in widths):
            raise SpecplanError(f"NF4 needs layer widths divisible by {NF4_BLOCK}, this model has {sorted(set(widths))}; "
                                "use --method gptq")
        return method
    return replace(method, group_size=pick_group_size(widths, method.group_size))


def checkpoint_name(method: QuantMethod, dtype: str) -> str:
    """``gptq-w4g64`` or ``nf4-bfloat16``: NF4 checkpoints also store the compute dtype (and keep
    the unquantized tensors, norms and embeddings, in it); GPTQ ones do not depend on it."""
    return method.label if method.name == "gptq" else f"{method.label}-{dtype}"


def default_checkpoint_dir(source_fingerprint: str, name: str) -> Path:
    from specplan.models.load import cache_root

    return cache_root() / "quantized" / f"{name}-{source_fingerprint.removeprefix('sha256:')[:16]}"


def read_manifest(path: Path) -> dict | None:
    manifest = Path(path) / MANIFEST
    fix = f"delete {path} and quantize again"
    return read_json_object(manifest, fix, SpecplanError) if manifest.is_file() else None


def quantize(source: str, method_name: str, output: str | Path | None = None, *,
             calibration_limit: int | None = None, dtype: str = "bfloat16") -> QuantizedCheckpoint:
    """Make (or find in the cache) the ``method_name`` checkpoint of MODEL ``source``.

    Parameters: ``source`` is MODEL (``default``, a .gguf, a directory); ``output`` a
    directory to write instead of the cache; ``calibration_limit`` is the number of
    Spec-Bench calibration prompts GPTQ sees (default 40, spread over categories); ``dtype`` the
    NF4 compute dtype recorded in the checkpoint.
    Raises: BackendMissingError if the method's backend is not installed; ModelError for a bad MODEL.
    """
    from specplan.quant.backends import require_backend
    from specplan.models.load import fingerprint, resolve_model_dir

    source_dir = resolve_model_dir(source)
    method = resolve_method(method_name, source_dir)
    require_backend(method)
    source_fingerprint = fingerprint(source_dir)
    name = checkpoint_name(method, dtype)
    target = Path(output) if output else default_checkpoint_dir(source_fingerprint, name)
    if output is not None and target.exists() and any(target.iterdir()) and read_manifest(target) is None:
        raise SpecplanError(f"{target} exists and is not a specplan quantized checkpoint; pass a new or empty -o DIR")
    manifest = {"source": source, "source_fingerprint": source_fingerprint, "method": method.name,
                "label": method.label, "name": name}
    seconds = []

    def build(folder: Path) -> None:
        seconds.append(_build(method, source_dir, folder, manifest, calibration_limit, dtype))

    def announce() -> None:
        print(f"specplan: quantizing {source} with {method.label} into {target} (once)", file=sys.stderr, flush=True)

    # a cache entry: sizes and digests in its manifest.yaml, checked on every open, rebuilt if damaged
    open_entry(target, f"{source_fingerprint}:{name}", build, announce=announce)
    return QuantizedCheckpoint(target, method, source, source_fingerprint,
                               variant_fingerprint(source_fingerprint, method.label), sum(seconds))


def _build(method: QuantMethod, source_dir: str, folder: Path, manifest: dict, calibration_limit: int | None,
           dtype: str) -> float:
    """Write the checkpoint and its ``specplan-quant.json`` into the empty ``folder`` (a cache entry's
    private temporary folder, published whole by :func:`~specplan.models.cache_entry.open_entry`);
    return the seconds it took."""
    start = time.perf_counter()
    count = _write_checkpoint(method, source_dir, folder, calibration_limit, dtype)
    seconds = time.perf_counter() - start
    manifest = {**manifest, "calibration": {"prompts": "spec-bench:calibration", "count": count},
                "seconds": round(seconds, 1)}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")  # open_entry syncs and publishes the folder
    return seconds


def _write_checkpoint(method: QuantMethod, source_dir: str, output: Path, calibration_limit: int | None,
                      dtype: str) -> int:
    """Quantize into ``output``; return how many calibration prompts were used (0 for NF4)."""
    if method.name == "gptq":
        from specplan.quant.gptq import quantize_gptq

        return quantize_gptq(source_dir, output, method, calibration_limit)
    from specplan.quant.nf4 import save_nf4

    save_nf4(source_dir, output, dtype)
    return 0
