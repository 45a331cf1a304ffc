"""torch.compile'd model steps over a :class:`StaticKVCache`, widths bucketed.

A step of ``n`` new tokens is padded up to the smallest bucket in :data:`BUCKETS` that holds
it, so a handful of graphs serve every width (gpt-fast and vLLM capture CUDA graphs per batch
size the same way). The padding rows get token 0 and the next positions; they write keys and
values past the cache's length pointer (scratch the pointer never covers), no real row
attends to them, and their logits are dropped. Attention reads ``kv_length = past + bucket``
positions; the additive mask [1, 1, bucket, kv_length] blocks every column a row must not
see, and its last dimension is marked dynamic, so the cache's growing length needs no new
graph (one graph per bucket per model, not per context length).

On CPU the graph uses transformers' ``eager`` attention (matmul, softmax, matmul: inductor
fuses it; the CPU flash-attention kernel with a mask was the slowest part of the compiled
step when measured) and inductor ``freezing`` (weights become constants, linears run
prepacked oneDNN kernels). Each model gets its own copy of the traced function, so no frozen
graph is ever shared between two models of the same shape.

One compiled function per model per process (``torch.compile`` caches its graphs on it),
shared by every session of that model: ``inductor`` (its C++ backend on CPU; on CUDA with
``mode="reduce-overhead"``, i.e. CUDA graphs). Steps wider than the largest bucket (a prompt's
prefill) run eagerly over the same cache. On CUDA (not measured here: no GPU on the machine this
was written on) the key length is the whole buffer instead, because CUDA graphs replay fixed
shapes; the logits and hidden states are cloned out of the graph's output buffers. ``compile_seconds`` accumulates the time of calls
that compiled a new graph, so callers report it apart from step time.
"""

from __future__ import annotations

import contextlib
import time
import types
import weakref

import torch

from specplan.runtime.compile.static_cache import StaticKVCache

BUCKETS = (1, 2, 4, 8, 16, 32, 64)
ATTENTION = "eager"  # transformers' matmul-softmax-matmul attention, which inductor fuses
INDUCTOR_OPTIONS = {"freezing": True}  # weights as constants: prepacked oneDNN linears on CPU


def bucket_of(count: int) -> int | None:
    """The smallest bucket holding ``count`` tokens, or None when wider than every bucket."""
    return next((bucket for bucket in BUCKETS if bucket >= count), None)


def _step(model, cache, input_ids, position_ids, attention_mask):
    """The traced function: one forward over the cache, logits [1, bucket, vocab] and the last
    hidden states [1, bucket, hidden] (what the LM head reads; a draft head's features). The
    decoder and the LM head run apart, the arithmetic of the model's own forward. The key
    length is read from the mask, whose last dimension is dynamic: one graph per bucket."""
    cache.kv_length = attention_mask.shape[-1]
    hidden = model.get_decoder()(input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                                 past_key_values=cache, use_cache=True).last_hidden_state
    return model.get_output_embeddings()(hidden), hidden


class CompiledStep:
    """A model's compiled forward and the padding that makes a few graphs serve every width."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.model = model
        self.device = device
        step = _own_copy(_step, model)
        self.cuda = device.type == "cuda"
        if self.cuda:  # CUDA graphs replay fixed shapes: attention reads the whole buffer
            self.function = torch.compile(step, mode="reduce-overhead")
        else:
            self.function = torch.compile(step, options=dict(INDUCTOR_OPTIONS))
        self.graphs: set[tuple[int, int]] = set()  # (bucket, kv_length) already compiled
        self.compile_seconds = 0.0
        self.calls = 0

    def run(self, cache: StaticKVCache, tokens: list[int], tree=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [len(tokens), vocab] and last hidden states [len(tokens), hidden] of one padded
        forward; the cache keeps ``len(tokens)`` rows."""
        count, past = len(tokens), cache.length
        bucket = bucket_of(count)
        kv_length = max(cache.capacity, past + bucket) if self.cuda else past + bucket
        dtype = self.model.dtype
        input_ids = torch.zeros((1, bucket), dtype=torch.long, device=self.device)
        input_ids[0, :count] = torch.tensor(tokens, dtype=torch.long, device=self.device)
        positions = torch.arange(past, past + bucket, device=self.device).unsqueeze(0)  # [1, bucket]
        mask = padded_mask(past, count, bucket, kv_length, dtype, self.device, tree)
        if tree is not None:
            positions[:, :count] = tree.position_ids(past, self.device)
        cache.begin(bucket, kv_length)
        key = (bucket, cache.capacity)
        begin = time.perf_counter()
        if self.cuda:
            torch.compiler.cudagraph_mark_step_begin()
            logits, hidden = (output.clone() for output in self.function(self.model, cache, input_ids, positions, mask))
        else:  # the clones: replays reuse the graph's output buffers
            torch._dynamo.mark_dynamic(mask, 3)
            with attention_implementation(self.model, ATTENTION):
                logits, hidden = self.function(self.model, cache, input_ids, positions, mask)
        if key not in self.graphs:
            self.graphs.add(key)
            self.compile_seconds += time.perf_counter() - begin
        cache.commit(count)
        self.calls += 1
        return logits[0, :count], hidden[0, :count]


@contextlib.contextmanager
def attention_implementation(model: torch.nn.Module, name: str):
    """Run ``model`` with transformers' attention ``name`` (the config is shared with eager
    sessions of the same model and with layer-skip views, so it is restored afterwards)."""
    config = model.config
    previous = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous


def padded_mask(past: int, count: int, bucket: int, kv_length: int, dtype: torch.dtype,
                device: torch.device, tree=None) -> torch.Tensor:
    """Additive mask [1, 1, bucket, kv_length]: 0 where attended, finfo.min elsewhere.

    Every row sees the cache and itself causally (padding rows too, so no row is empty);
    with ``tree`` the first ``count`` rows take the tree's own mask over ``past + count`` columns.
    """
    rows = torch.arange(bucket, device=device).unsqueeze(1) + past  # [bucket, 1] absolute positions
    columns = torch.arange(kv_length, device=device).unsqueeze(0)  # [1, kv_length]
    mask = torch.zeros((bucket, kv_length), dtype=dtype, device=device)
    mask.masked_fill_(columns > rows, torch.finfo(dtype).min)
    if tree is not None:
        mask[:count, : past + count] = tree.attention_mask(past, dtype, device)[0, 0]
    return mask.view(1, 1, bucket, kv_length)


def _own_copy(function, model):
    """``function`` with a code object of its own: dynamo caches graphs per code object, and
    frozen graphs hold one model's weights, so two models must never share a cache entry."""
    code = function.__code__.replace(co_name=f"{function.__name__}_{type(model).__name__}_{id(model):x}")
    return types.FunctionType(code, function.__globals__, code.co_name)


_STEPS: "weakref.WeakKeyDictionary[torch.nn.Module, CompiledStep]" = weakref.WeakKeyDictionary()


def compiled_step(model: torch.nn.Module, device: torch.device) -> CompiledStep:
    """The process-wide compiled step of ``model`` (created on first use)."""
    step = _STEPS.get(model)
    if step is None:
        step = _STEPS[model] = CompiledStep(model, device)
    return step
