"""Roofline latency T(n): the time of one forward of n new tokens, from datasheet figures.

A forward of a decoder-only transformer over ``n`` new tokens with ``context`` cached tokens
moves bytes (weights once, the KV cache, activations and logits) and does arithmetic (the
weight matmuls over n rows, attention over the cache). The roofline model (Williams,
Waterman, Patterson, "Roofline: an insightful visual performance model for multicore
architectures", CACM 52(4), 2009, doi:10.1145/1498765.1498785) says the forward takes the
longer of the two times at peak rate; we add a fixed overhead per forward and per layer
(kernel launches, the serving engine's step), which dominates small models::

    T(n) = overhead + max( bytes(n) / (eta_bw * bandwidth),
                           flops(n) / (eta_c * matmul_rate) + dequant_ops(n) / (eta_c * vector_rate) )

Weight-only 4-bit targets (NF4, GPTQ; W4A16) read a quarter of the bytes, so T(1) drops,
but every weight is dequantised on the vector units once per tile of ``dequant_tile`` token
rows before the 16-bit multiply, so ``dequant_ops(n) = weights * ops_per_weight *
ceil(n / tile)`` grows with n and a wide verification (a big tree) costs more than on the
16-bit model. That is the effect SpecMQuant (arXiv 2505.22179) measures and the reason its
hierarchy verifies a tree with a 16-bit middle model and only a short sequence with the
4-bit target (docs/planner-math.md section 4). The split of work between the two roofs is ours;
the tests check that T is monotone in n and that the 4-bit curve is steeper at large n.

``eta_bw`` and ``eta_c`` (fractions of peak) and the overheads come from a
:class:`Calibration`, fitted on a measured profile by :mod:`.calibration`.

References
----------
Williams et al. 2009 (roofline); Leviathan et al., arXiv 2211.17192 (T(gamma + 1) in the
speedup); Sequoia, arXiv 2402.12374 (hardware-aware tree size from T(n)); SpecMQuant,
arXiv 2505.22179 (4-bit verification cost); Frantar et al. GPTQ, arXiv 2210.17323 and
Dettmers et al. QLoRA/NF4, arXiv 2305.14314 (the storage formats below).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from specplan.core.profile import LatencyCurve, ModelShape

ROOFLINE_WIDTHS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128)
LOGIT_BYTES = 4  # logits are written in float32 (transformers upcasts them)


@dataclass(frozen=True)
class Precision:
    """How a model's weights are stored and multiplied.

    ``weight_bits``: storage per weight including scales and zero points; ``matmul``: the
    rate key in :attr:`DeviceRoof.tflops` the multiply runs at (activations' precision);
    ``activation_bytes``: per activation / KV element; ``dequant_ops``: vector operations
    per weight per dequantisation (0 for unquantised weights).
    """

    name: str
    weight_bits: float
    matmul: str
    activation_bytes: int
    dequant_ops: float = 0.0

    @property
    def quantized(self) -> bool:
        return self.dequant_ops > 0


# Storage formats. NF4 (QLoRA, arXiv 2305.14314): 4 bits + one fp32 absmax per 64 weights
# (4.5 bits; double quantisation brings it to ~4.13). GPTQ (arXiv 2210.17323) w4 g128: 4 bits +
# an fp16 scale and a 4-bit zero per 128 weights. llama.cpp Q4_1: 32 weights + fp16 scale + fp16
# min per block (5 bits). Dequantising one weight: unpack (shift, mask), convert, subtract the
# zero / look up the NF4 code, scale: about 4 vector operations (our estimate).
PRECISIONS = {
    "float32": Precision("float32", 32.0, "fp32", 4),
    "bfloat16": Precision("bfloat16", 16.0, "bf16", 2),
    "float16": Precision("float16", 16.0, "fp16", 2),
    "int8": Precision("int8", 8.0 + 16.0 / 128, "bf16", 2, 2.0),
    "nf4": Precision("nf4", 4.5, "bf16", 2, 4.0),
    "gptq-w4g128": Precision("gptq-w4g128", 4.0 + 20.0 / 128, "bf16", 2, 4.0),
    "q4_1": Precision("q4_1", 5.0, "bf16", 2, 4.0),
    # The precisions published GPU results name (docs/formats.md, "Published settings").
    # W8A8 (SmoothQuant, arXiv 2211.10438): int8 weights with a per-channel scale, int8 matmuls,
    # scales applied in the epilogue (no dequantisation pass). W4A16 (GPTQ / AWQ weights in a
    # Marlin-style kernel, github.com/IST-DASLab/marlin): as gptq-w4g128. W4A8 (QServe, arXiv
    # 2405.04532): 4-bit weights widened to int8 in registers (about 2 operations per weight,
    # our estimate) before an int8 matmul.
    "w8a8": Precision("w8a8", 8.0, "int8", 2),
    "w4a16": Precision("w4a16", 4.0 + 20.0 / 128, "fp16", 2, 4.0),
    "w4a8": Precision("w4a8", 4.0 + 20.0 / 128, "int8", 2, 2.0),
}


def precision_for(quant: str, dtype: str) -> Precision:
    """The :class:`Precision` of a profile's model entry (``quant``, ``dtype``).

    >>> precision_for("none", "bfloat16").weight_bits
    16.0
    >>> precision_for("gptq-w4g64", "bfloat16").weight_bits
    4.3125
    """
    if quant in ("", "none"):
        if dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype {dtype!r} is not one of float32, bfloat16, float16")
        return PRECISIONS[dtype]
    if quant in PRECISIONS:
        return PRECISIONS[quant]
    match = re.fullmatch(r"gptq-w(\d+)g(\d+)", quant)
    if match:  # b-bit weights + an fp16 scale and a b-bit zero per group of g
        bits, group = int(match.group(1)), int(match.group(2))
        return Precision(quant, bits + (16.0 + bits) / group, "bf16", 2, 4.0)
    raise ValueError(f"quantization {quant!r} has no roofline model; known: none, {', '.join(PRECISIONS)}")


@dataclass(frozen=True)
class DeviceRoof:
    """One SKU's figures (``planner/data/skus.yaml``): peaks the roofline reads, in SI units."""

    sku: str
    name: str
    kind: str  # cpu | cuda
    bandwidth_gbs: float
    tflops: dict[str, float | None]  # dense matmul peak per precision key; None = no such path
    vector_tflops: float
    memory_gb: float = 0.0
    overhead_per_forward_us: float = 0.0
    overhead_per_layer_us: float = 0.0
    dequant_tile: int = 16
    overhead_per_sequence_us: float = 0.0  # the engine's work per sequence per forward (sampling, bookkeeping)
    source: dict[str, str] = field(default_factory=dict)

    def matmul_tflops(self, key: str) -> float:
        """Peak for ``key``; fp16 falls back to bf16 and back; else the vector fp32 rate."""
        for candidate in (key, {"fp16": "bf16", "bf16": "fp16"}.get(key, key)):
            rate = self.tflops.get(candidate)
            if rate:
                return float(rate)
        return float(self.vector_tflops)


@dataclass(frozen=True)
class Calibration:
    """Fractions of peak reached and the overheads (None: the SKU's assumed ones).

    ``bandwidth_efficiency`` scales the memory roof, ``compute_efficiency`` both compute
    roofs; fitted by :func:`specplan.planner.hardware.calibration.fit_calibration`.
    """

    bandwidth_efficiency: float = 1.0
    compute_efficiency: float = 1.0
    overhead_per_forward_us: float | None = None
    overhead_per_layer_us: float | None = None
    source: str = "datasheet"  # datasheet | fitted:<profile> | given

    def __post_init__(self) -> None:
        if not (0 < self.bandwidth_efficiency <= 10 and 0 < self.compute_efficiency <= 10):
            raise ValueError(f"efficiencies must be positive fractions of peak, got {self.bandwidth_efficiency}, "
                             f"{self.compute_efficiency}")


@dataclass(frozen=True)
class ForwardCost:
    """The terms of one forward: bytes, operations, and the three times (ms)."""

    bytes: float
    flops: float
    dequant_ops: float
    memory_ms: float
    compute_ms: float
    overhead_ms: float

    @property
    def ms(self) -> float:
        return self.overhead_ms + max(self.memory_ms, self.compute_ms)

    @property
    def bound(self) -> str:
        """Which roof sets the time: ``memory`` or ``compute`` (overhead is added to both)."""
        return "compute" if self.compute_ms > self.memory_ms else "memory"


def layer_weights(shape: ModelShape) -> int:
    """Weights of one decoder layer: q, k, v, o projections, gated MLP (3 matrices), 2 norms."""
    attention = shape.hidden * shape.head_dim * (2 * shape.heads + 2 * shape.kv_heads)
    return attention + 3 * shape.hidden * shape.intermediate + 2 * shape.hidden


def matmul_weights(shape: ModelShape) -> int:
    """Weights read by every forward: all layers, the LM head (vocab x hidden, tied or not) and
    any ``extra_weights`` (an EAGLE-style head's feature projection).

    >>> smol = ModelShape(30, 576, 9, 3, 64, 49152, 1536)
    >>> round(matmul_weights(smol) / 1e6, 1)
    134.5
    """
    return shape.layers * layer_weights(shape) + shape.vocab * shape.hidden + shape.hidden + shape.extra_weights


def forward_cost(shape: ModelShape, precision: Precision, n: int, context: int, device: DeviceRoof,
                 calibration: Calibration | None = None, batch: int = 1) -> ForwardCost:
    """Bytes, operations and times of one forward of ``batch`` sequences x ``n`` new tokens,
    each sequence over ``context`` cached ones (docs/planner-math.md sections 7.2 and 11.1).

    Bytes: the weights once per forward whatever the batch (``weight_bits``; the embedding
    rows read are negligible), each sequence's KV cache read (context) and written (n),
    activations in and out of every matmul for ``batch * n`` rows, and the logits (``batch * n``
    x vocab, float32). Flops: 2 per weight per token row, plus each sequence's attention QK^T
    and AV (4 * n * (context + n) * heads * head_dim per layer). Dequantisation: ``dequant_ops``
    per quantised weight (the LM head stays 16-bit) per ``ceil(batch * n / dequant_tile)``.

    >>> smol, h100 = ModelShape(30, 576, 9, 3, 64, 49152, 1536), DeviceRoof("h", "h", "cuda", 3350.0, {"bf16": 989.4}, 66.9)
    >>> one = forward_cost(smol, PRECISIONS["bfloat16"], 4, 256, h100)
    >>> eight = forward_cost(smol, PRECISIONS["bfloat16"], 4, 256, h100, batch=8)
    >>> round(eight.flops / one.flops, 6), eight.bytes < 8 * one.bytes
    (8.0, True)
    """
    if n < 1 or context < 0 or batch < 1:
        raise ValueError(f"a forward needs n >= 1, context >= 0 and batch >= 1, got n={n}, context={context}, "
                         f"batch={batch}")
    calibration = calibration or Calibration()
    act = precision.activation_bytes
    rows = batch * n  # token rows through every matmul
    kv_width = 2 * shape.kv_heads * shape.head_dim  # K and V per token per layer
    head = shape.vocab * shape.hidden
    body = matmul_weights(shape) - head
    head_bits = 16 if precision.weight_bits < 16 else precision.weight_bits  # quantised models keep a 16-bit LM head
    weight_bytes = body * precision.weight_bits / 8 + head * head_bits / 8
    kv_bytes = batch * shape.layers * kv_width * (context + n) * act
    per_layer_activations = 2 * shape.hidden * 4 + shape.heads * shape.head_dim * 2 + 3 * shape.intermediate
    activation_bytes = rows * shape.layers * per_layer_activations * act + rows * shape.vocab * LOGIT_BYTES
    total_bytes = weight_bytes + kv_bytes + activation_bytes
    attention = 4.0 * n * (context + n) * shape.heads * shape.head_dim * shape.layers
    flops = 2.0 * rows * matmul_weights(shape) + batch * attention
    tiles = math.ceil(rows / max(1, device.dequant_tile))
    dequant = body * precision.dequant_ops * tiles if precision.quantized else 0.0
    memory_ms = total_bytes / (calibration.bandwidth_efficiency * device.bandwidth_gbs * 1e9) * 1e3
    matmul_rate = device.matmul_tflops(precision.matmul) * 1e12 * calibration.compute_efficiency
    vector_rate = device.vector_tflops * 1e12 * calibration.compute_efficiency
    compute_ms = (flops / matmul_rate + dequant / vector_rate) * 1e3
    per_forward = device.overhead_per_forward_us if calibration.overhead_per_forward_us is None \
        else calibration.overhead_per_forward_us
    per_layer = device.overhead_per_layer_us if calibration.overhead_per_layer_us is None \
        else calibration.overhead_per_layer_us
    overhead_ms = (per_forward + per_layer * shape.layers + device.overhead_per_sequence_us * batch) / 1e3
    return ForwardCost(total_bytes, flops, dequant, memory_ms, compute_ms, overhead_ms)


def roofline_ms(shape: ModelShape, precision: Precision, n: int, context: int, device: DeviceRoof,
                calibration: Calibration | None = None, batch: int = 1) -> float:
    """T(n, batch) in ms (see :func:`forward_cost`)."""
    return forward_cost(shape, precision, n, context, device, calibration, batch).ms


def roofline_curve(shape: ModelShape, precision: Precision, context: int, device: DeviceRoof,
                   calibration: Calibration | None = None,
                   widths: tuple[int, ...] = ROOFLINE_WIDTHS, batch: int = 1) -> LatencyCurve:
    """A :class:`~specplan.core.profile.LatencyCurve` of T(n, batch) at ``widths``, marked ``source: roofline``."""
    ms = tuple(roofline_ms(shape, precision, n, context, device, calibration, batch) for n in widths)
    return LatencyCurve(context, tuple(widths), ms, "roofline", batch)


def largest_batch(shape: ModelShape, precision: Precision, context: int, device: DeviceRoof, width: int) -> int:
    """The most sequences whose weights and KV cache (``context + width`` positions each) fit in the
    SKU's ``memory_gb`` (0 when the weights alone do not; a large number when memory is not given).

    >>> smol = ModelShape(30, 576, 9, 3, 64, 49152, 1536)
    >>> largest_batch(smol, PRECISIONS["bfloat16"], 256, DeviceRoof("x", "x", "cuda", 1.0, {}, 1.0, memory_gb=1.0), 64)
    99
    """
    if device.memory_gb <= 0:
        return 1 << 20
    weight_bytes = matmul_weights(shape) * precision.weight_bits / 8
    per_sequence = shape.layers * 2 * shape.kv_heads * shape.head_dim * (context + width) * precision.activation_bytes
    free = device.memory_gb * 1e9 - weight_bytes
    return max(0, int(free // per_sequence))


def ridge_width(shape: ModelShape, precision: Precision, context: int, device: DeviceRoof,
                calibration: Calibration | None = None, limit: int = 4096) -> int:
    """The smallest n at which the forward turns compute-bound (``limit`` if it never does).

    Below it, verifying n tokens costs about what one token does: the room for wide trees.
    """
    low, high = 1, limit
    if forward_cost(shape, precision, limit, context, device, calibration).bound == "memory":
        return limit
    while low < high:
        middle = (low + high) // 2
        if forward_cost(shape, precision, middle, context, device, calibration).bound == "compute":
            high = middle
        else:
            low = middle + 1
    return low
