"""Models of a named shape or a Hugging Face config, with random weights, for latency-only profiles.

Latency needs no trained weights: the cost of a forward depends on the architecture, the
precision and the device, not on the values (the weights are drawn as the architecture's own
initialiser draws them, so no denormals slow a CPU). ``--arch`` is a name from
``models/data/arch.yaml`` (the published configs of Llama-3-8B, Llama-3-70B, Qwen2.5-0.5B /
1.5B, SmolLM2-135M, and a Llama-shaped 1.5B) or a config JSON file. A shape with a ``slice``
is built with fewer layers (e.g. 2 and 4 of Llama-3-70B's 80) and its curve scaled linearly in
layers (:func:`scale_to_layers`; docs/guide.md, "Latency-only profiles").

:func:`shape_of_arch` gives the roofline's :class:`~specplan.core.profile.ModelShape` of a name
without building anything (``specplan predict``), including EAGLE-style draft heads named
``eagle-head-<shape>`` and ``eagle3-head-<shape>`` (docs/planner-math.md, section 13).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from specplan.core.errors import ModelError
from specplan.core.profile import ModelShape, shape_from_config

SCHEMA_VERSION = 1
HEAD_PREFIXES = ("eagle3-head-", "eagle-head-")
# EAGLE-3's released Llama-3.1-8B head predicts over a draft vocabulary of 32,000 tokens
# (config.json of yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: draft_vocab_size 32000; arXiv 2503.01840).
EAGLE3_DRAFT_VOCAB = 32000


@dataclass(frozen=True)
class ArchSpec:
    """A model shape: its name, its config fields, and the layer counts to build (slice)."""

    name: str
    config: dict[str, Any]  # Hugging Face config fields (model_type, hidden_size, ...)
    slice: tuple[int, ...] = ()  # layer counts built and timed; () = the full depth

    @property
    def layers(self) -> int:
        return int(self.config["num_hidden_layers"])

    @property
    def fingerprint(self) -> str:
        text = json.dumps(self.config, sort_keys=True)
        return f"arch:{self.name}:sha256:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def named_shapes() -> dict[str, dict[str, Any]]:
    """The shapes of ``models/data/arch.yaml`` by name."""
    text = resources.files("specplan.models").joinpath("data/arch.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["shapes"]


def resolve_arch(value: str) -> ArchSpec:
    """``--arch`` value -> ArchSpec: a shape name, or a config JSON file (``slice`` optional)."""
    shapes = named_shapes()
    if value in shapes:
        fields = dict(shapes[value])
        name = value
    else:
        path = Path(value)
        if not path.is_file():
            raise ModelError(f"--arch {value}: neither a named shape ({', '.join(sorted(shapes))}) "
                             "nor a config JSON file")
        try:
            fields = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ModelError(f"--arch {value}: not a readable JSON config ({error}); pass a config.json") from None
        if not isinstance(fields, dict):
            raise ModelError(f"--arch {value}: a config JSON must be an object of config fields")
        name = path.stem
    return _checked(name, fields)


def _checked(name: str, fields: dict[str, Any]) -> ArchSpec:
    """The spec, once the fields a decoder needs are present and the slice is sane."""
    needed = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "vocab_size")
    missing = [key for key in needed if key not in fields]
    if missing:
        raise ModelError(f"--arch {name}: the config lacks {', '.join(missing)}; give a decoder-only "
                         "Hugging Face config")
    layer_slice = tuple(int(count) for count in fields.pop("slice", ()) or ())
    layers = int(fields["num_hidden_layers"])
    if layer_slice and (len(layer_slice) != 2 or not 0 < layer_slice[0] < layer_slice[1] <= layers):
        raise ModelError(f"--arch {name}: slice must be two layer counts 0 < a < b <= {layers}, got "
                         f"{list(layer_slice)}")
    return ArchSpec(name, fields, layer_slice)


def build_random(spec: ArchSpec, dtype: str, device: str, layers: int | None = None):
    """The causal LM of ``spec`` (with ``layers`` decoder layers if given), random weights, eval mode."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from specplan.models.load import DTYPES

    fields = {key: value for key, value in spec.config.items() if key not in ("architectures", "model_type")}
    if layers is not None:
        fields["num_hidden_layers"] = layers
    try:
        config = AutoConfig.for_model(spec.config["model_type"], **fields)
    except ValueError as error:
        raise ModelError(f"--arch {spec.name}: transformers does not know this config ({error})") from None
    torch.manual_seed(0)
    with torch.device(device):  # drawn where it runs: a 70B slice's 2 GB embedding is not built on the CPU first
        model = AutoModelForCausalLM.from_config(config, dtype=DTYPES[dtype], attn_implementation="sdpa")
    return model.eval()


def scale_to_layers(short_ms: float, long_ms: float, short_layers: int, long_layers: int, layers: int) -> float:
    """T at ``layers`` from T at two slice depths: T(L) = T(a) + (L - a) * (T(b) - T(a)) / (b - a).

    A decoder's forward is the embedding and head (fixed) plus one cost per layer (every layer
    has the same shape), so T is linear in the layer count; two depths fix the line. Timing
    noise larger than a layer's cost could tilt the line downwards; a layer costs at least 0.
    """
    per_layer = max(0.0, (long_ms - short_ms) / (long_layers - short_layers))  # below 0 is timing noise
    return short_ms + (layers - short_layers) * per_layer


def shape_of_arch(value: str) -> ModelShape:
    """The roofline shape of a named shape, a config JSON file, or an EAGLE-style head.

    ``eagle-head-<shape>`` (EAGLE-1/2, arXiv 2401.15077 section 4): one decoder layer of the
    target's widths, an FC from [embedding; feature] (2h) to h, and the target's LM head.
    ``eagle3-head-<shape>`` (EAGLE-3, arXiv 2503.01840 section 3): an FC fusing three of the
    target's layers (3h -> h), one decoder layer whose q/k/v read [embedding; fused feature] (2h
    inputs), and an LM head over a draft vocabulary of 32,000 tokens.

    >>> head, target = shape_of_arch("eagle-head-llama-3-8b"), shape_of_arch("llama-3-8b")
    >>> head.layers, head.hidden == target.hidden, head.extra_weights == 2 * 4096 * 4096
    (1, True, True)
    """
    prefix = next((p for p in HEAD_PREFIXES if value.startswith(p)), "")
    spec = resolve_arch(value[len(prefix):] if prefix else value)
    shape = shape_from_config(type("Fields", (), spec.config))
    if shape is None:  # resolve_arch checked the fields; head_dim or a count was malformed
        raise ModelError(f"--arch {value}: the config's widths do not make a decoder shape")
    shape = replace(shape, source="builtin")
    if prefix == "eagle-head-":
        return replace(shape, layers=1, extra_weights=2 * shape.hidden * shape.hidden)
    if prefix == "eagle3-head-":
        qkv_input = shape.hidden * shape.head_dim * (shape.heads + 2 * shape.kv_heads)
        return replace(shape, layers=1, vocab=min(shape.vocab, EAGLE3_DRAFT_VOCAB),
                       extra_weights=3 * shape.hidden * shape.hidden + qkv_input)
    return shape
