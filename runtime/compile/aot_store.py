"""Ahead-of-time packages under ``$SPECPLAN_CACHE/aot``: keyed, built once, checked on every
load (docs/guide.md, "Compiled steps ahead of time"; docs/formats.md, "AOT packages").

A package is a folder ``aot/<digest>/`` holding ``step.pt2`` (AOTInductor's package of
:class:`specplan.runtime.compile.aot_step.ExportableStep`) and ``package.yaml``: the key it was built
for, the sha256 of ``step.pt2``, and the name, shape and dtype of every constant it reads.

The key is everything that makes compiled code valid for a model other than its weights
(weights are read from the live model at load): the model class and its config, the dtype,
the device kind and capability (the CPU's vector ISA, or the CUDA compute capability), the
torch and transformers versions and :data:`~specplan.runtime.compile.aot_step.STEP_VERSION`. A
package whose ``package.yaml`` does not match the key, whose ``step.pt2`` does not match its
digest, or whose constants do not match the model's is *stale*: never used, rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers

from specplan.core.yamlio import safe_load_text, write_document
from specplan.models.cache_entry import file_digest
from specplan.models.registry import cache_root
from specplan.runtime.compile.aot_step import STEP_VERSION, AotStep, example_inputs, export_step, model_constants

SCHEMA_VERSION = 1
# No weights inside the package; ``freezing`` lets inductor prepack the linears' weights (oneDNN
# on CPU), and runtime constant folding computes those prepacked copies from the live model's
# tensors when the package is loaded (1.5x faster steps than unfrozen, measured in one process
# on the 135M default model; the prepacked copies cost about one more copy of the weights).
INDUCTOR_OPTIONS = {"aot_inductor.package_constants_in_so": False, "freezing": True,
                    "aot_inductor.use_runtime_constant_folding": True}
PACKAGE_FILE = "step.pt2"
META_FILE = "package.yaml"


@dataclass(frozen=True)
class PackageKey:
    """What a package was compiled for (weights excluded: they are read at load)."""

    model_class: str
    config_sha256: str
    dtype: str
    device: str  # cpu | cuda
    capability: str  # the CPU's vector ISA (torch.backends.cpu.get_cpu_capability) or cuda sm_XY
    torch: str
    transformers: str
    step_version: int

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:20]


def device_capability(device: torch.device) -> str:
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm_{major}{minor}"
    return str(torch.backends.cpu.get_cpu_capability())


def package_key(model: torch.nn.Module, device: torch.device) -> PackageKey:
    config = json.dumps(model.config.to_dict(), sort_keys=True, default=str)
    return PackageKey(
        model_class=type(model).__name__,
        config_sha256=hashlib.sha256(config.encode()).hexdigest(),
        dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        device=device.type,
        capability=device_capability(device),
        torch=str(torch.__version__),
        transformers=str(transformers.__version__),
        step_version=STEP_VERSION,
    )


def package_folder(key: PackageKey, root: Path | None = None) -> Path:
    return (root or cache_root()) / "aot" / key.digest


def constant_table(model: torch.nn.Module) -> dict[str, list]:
    """name -> [shape..., dtype] of every constant the package reads."""
    return {name: [*tensor.shape, str(tensor.dtype).removeprefix("torch.")]
            for name, tensor in model_constants(model).items()}


def stale_reason(folder: Path, key: PackageKey, model: torch.nn.Module) -> str | None:
    """Why the package in ``folder`` cannot serve ``model`` (None: it can)."""
    meta_path, package_path = folder / META_FILE, folder / PACKAGE_FILE
    if not meta_path.is_file() or not package_path.is_file():
        return "no package"
    try:
        meta = safe_load_text(meta_path.read_text())
    except Exception as error:  # an unreadable record is stale, never fatal
        return f"unreadable {META_FILE} ({type(error).__name__})"
    if not isinstance(meta, dict) or meta.get("schema_version") != SCHEMA_VERSION:
        return f"{META_FILE} has another schema_version"
    built_for = meta.get("key") or {}
    for field, wanted in asdict(key).items():
        if built_for.get(field) != wanted:
            return f"built for {field} {built_for.get(field)!r}, this is {wanted!r}"
    if meta.get("package_sha256") != file_digest(package_path):
        return f"{PACKAGE_FILE} does not match its recorded sha256"
    if meta.get("constants") != constant_table(model):
        return "its constants differ from the model's tensors"
    return None


def build_package(model: torch.nn.Module, device: torch.device, key: PackageKey, folder: Path) -> float:
    """Export and compile ``model``'s step into ``folder``; seconds spent. The package is
    compiled in a temporary folder beside it and moved into place before ``package.yaml`` is
    written, so an interrupted build leaves no package that looks complete."""
    begin = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / META_FILE).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as scratch, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's own pytree deprecations while tracing
        warnings.simplefilter("ignore", DeprecationWarning)
        program = export_step(model, device)
        built = Path(scratch) / PACKAGE_FILE
        options = dict(INDUCTOR_OPTIONS)
        torch._inductor.aoti_compile_and_package(program, package_path=str(built), inductor_configs=options)
        shutil.move(str(built), folder / PACKAGE_FILE)
    seconds = time.perf_counter() - begin
    write_document(folder / META_FILE, {
        "schema_version": SCHEMA_VERSION, "key": asdict(key), "package_sha256": file_digest(folder / PACKAGE_FILE),
        "build_seconds": round(seconds, 1), "constants": constant_table(model)})
    return seconds


def load_package(model: torch.nn.Module, device: torch.device, folder: Path) -> AotStep:
    """The package in ``folder``, its constants pointed at ``model``'s own tensors."""
    begin = time.perf_counter()
    runner = torch._inductor.aoti_load_package(str(folder / PACKAGE_FILE))
    constants = model_constants(model)
    wanted = [name for name in runner.get_constant_fqns() if not name.startswith("_FOLDED_CONST_")]
    # folded constants (prepacked weights) are computed from these by the package on its first run
    runner.load_constants({name: constants[name] for name in wanted}, check_full_update=False, user_managed=True)
    with torch.inference_mode():  # the first run folds the constants: here, not inside a prompt
        runner(*example_inputs(model, device, width=1, past=1, capacity=4))
    return AotStep(model, device, runner, time.perf_counter() - begin)

