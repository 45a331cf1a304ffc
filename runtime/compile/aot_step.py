"""A model step compiled ahead of time: one torch.export'd, AOTInductor-compiled package per
model architecture, loaded in about a second instead of compiled in every process
(docs/guide.md, "Compiled steps ahead of time").

The exported function is :class:`ExportableStep`: one forward of ``width`` new tokens over a
static KV cache whose per-layer key and value buffers are inputs and are written in place
(``index_copy_`` at ``write_index``), returning logits [1, width, vocab] and the last hidden
states [1, width, hidden]. Three dimensions are dynamic, so one package serves every step:

- ``width`` (1..64): the new tokens, so no padding to buckets is needed (the JIT path,
  :mod:`specplan.runtime.compile.compiled`, pads to buckets because inductor specialises widths);
- ``kv_length``: the positions attention reads (the mask's last dimension, past + width);
- ``capacity``: the cache buffers' length, so a cache that grows keeps its package.

Weights are not inside the package (``aot_inductor.package_constants_in_so = False``): the
loaded package reads the model's own parameter tensors (``load_constants(...,
user_managed=True)``) and folds its prepacked copies from them at load (inductor ``freezing``
with runtime constant folding), so one package serves every model of the same architecture,
dtype and device (:mod:`specplan.runtime.compile.aot_store` keys it that way).
Attention is transformers' ``eager`` implementation (matmul, softmax, matmul), as in the JIT
path, because its mask is the same 4-D additive mask for chains and trees.
"""

from __future__ import annotations

import torch

from specplan.runtime.compile.compiled import ATTENTION, attention_implementation, padded_mask
from specplan.runtime.compile.static_cache import StaticKVCache

MAX_WIDTH = 64  # new tokens per exported step; wider steps (prefills) run eagerly
STEP_VERSION = 2  # bump when ExportableStep's inputs or arithmetic change: old packages are rebuilt


class ExportableStep(torch.nn.Module):
    """``model``'s forward over caller-owned cache buffers, in the form torch.export traces."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, position_ids, attention_mask, write_index, keys: list, values: list):
        cache = _buffer_cache(keys, values, write_index, attention_mask.shape[-1], input_ids.device)
        hidden = self.model.get_decoder()(input_ids=input_ids, position_ids=position_ids,
                                          attention_mask=attention_mask, past_key_values=cache,
                                          use_cache=True).last_hidden_state
        return self.model.get_output_embeddings()(hidden), hidden


def _buffer_cache(keys: list, values: list, write_index, kv_length, device) -> StaticKVCache:
    """A StaticKVCache over the given buffers (its capacity argument is unused here: reading
    ``keys[0].shape[2]`` into an int would fix the capacity in the exported graph)."""
    cache = StaticKVCache(len(keys), device, capacity=1)
    for layer, layer_keys, layer_values in zip(cache.layers, keys, values):
        layer.keys, layer.values = layer_keys, layer_values
        layer.dtype, layer.device = layer_keys.dtype, layer_keys.device
        layer.is_initialized = True
    cache.write_index = write_index
    cache.kv_length = kv_length
    return cache


def example_inputs(model: torch.nn.Module, device: torch.device, width: int = 4, past: int = 8,
                   capacity: int = 32) -> tuple:
    """Inputs of the right kinds for tracing (their values do not matter)."""
    config = model.config.get_text_config(decoder=True)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    shape = (1, config.num_key_value_heads, capacity, head_dim)
    dtype = next(model.parameters()).dtype
    keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)]
    values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)]
    input_ids = torch.zeros((1, width), dtype=torch.long, device=device)
    positions = torch.arange(past, past + width, device=device).unsqueeze(0)
    mask = padded_mask(past, width, width, past + width, dtype, device)
    write_index = torch.arange(past, past + width, device=device)
    return input_ids, positions, mask, write_index, keys, values


def dynamic_shapes(layers: int) -> dict:
    """The dynamic dimensions of :class:`ExportableStep`'s inputs (width, kv_length, capacity)."""
    width = torch.export.Dim("width", min=1, max=MAX_WIDTH)
    kv_length = torch.export.Dim("kv_length", min=2, max=1 << 20)
    capacity = torch.export.Dim("capacity", min=2, max=1 << 20)
    return {"input_ids": {1: width}, "position_ids": {1: width}, "attention_mask": {2: width, 3: kv_length},
            "write_index": {0: width}, "keys": [{2: capacity}] * layers, "values": [{2: capacity}] * layers}


def export_step(model: torch.nn.Module, device: torch.device) -> "torch.export.ExportedProgram":
    """torch.export of :class:`ExportableStep` for ``model`` (eager attention while tracing)."""
    inputs = example_inputs(model, device)
    layers = len(inputs[4])
    with torch.no_grad(), attention_implementation(model, ATTENTION):
        return torch.export.export(ExportableStep(model), inputs, dynamic_shapes=dynamic_shapes(layers), strict=False)


def model_constants(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every tensor the exported step reads by name, as the package names them (tied weights
    under both names; non-persistent buffers such as rotary frequencies included)."""
    named = list(model.named_parameters(remove_duplicate=False)) + list(model.named_buffers(remove_duplicate=False))
    return {f"model.{name}": tensor for name, tensor in named}


class AotStep:
    """A loaded package driving steps over a :class:`StaticKVCache`; the same ``run`` as
    :class:`specplan.runtime.compile.compiled.CompiledStep`, with no padding and nothing compiled."""

    def __init__(self, model: torch.nn.Module, device: torch.device, runner, load_seconds: float):
        self.model = model
        self.device = device
        self.runner = runner
        self.load_seconds = load_seconds
        self.compile_seconds = 0.0  # nothing compiles in this process
        self.calls = 0

    def run(self, cache: StaticKVCache, tokens: list[int], tree=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [len(tokens), vocab] and last hidden states [len(tokens), hidden] of one forward;
        the cache keeps the new rows."""
        count, past = len(tokens), cache.length
        dtype = next(self.model.parameters()).dtype
        input_ids = torch.tensor([tokens], dtype=torch.long, device=self.device)  # [1, count]
        if tree is None:
            positions = torch.arange(past, past + count, device=self.device).unsqueeze(0)  # [1, count]
        else:
            positions = tree.position_ids(past, self.device)
        mask = padded_mask(past, count, count, past + count, dtype, self.device, tree)  # [1, 1, count, past + count]
        cache.begin(count)
        keys = [layer.keys for layer in cache.layers]
        values = [layer.values for layer in cache.layers]
        logits, hidden = self.runner(input_ids, positions, mask, cache.write_index, keys, values)
        cache.commit(count)
        self.calls += 1
        return logits[0], hidden[0]
