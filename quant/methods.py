"""The 4-bit methods specplan knows, as plain data: name, backend, the profile's quant label.

- ``nf4``: 4-bit NormalFloat weights with one absmax scale per block of 64, quantised at load
  time by bitsandbytes and dequantised to the compute dtype in each matmul. QLoRA, Dettmers
  et al., arXiv 2305.14314, section 3.
- ``gptq``: 4-bit integer weights with one scale and zero point per group of ``group_size``
  input columns, rounded column by column while the remaining columns absorb the error
  through the inverse Hessian of calibration activations. GPTQ, Frantar et al., arXiv
  2210.17323, Algorithm 1; run by GPTQModel.

No torch here: the CLI validates a method before any heavy import.
"""

from __future__ import annotations

from dataclasses import dataclass

from specplan.core.errors import SpecplanError

NF4_BLOCK = 64  # weights per NF4 absmax block (QLoRA's block size; bitsandbytes' default)
GROUP_SIZES = (128, 64, 32)  # tried in this order; the first that divides every input width wins


@dataclass(frozen=True)
class QuantMethod:
    name: str  # nf4 | gptq: what --method / --quant say
    module: str  # the Python package of its backend
    extra: str  # the specplan extra that installs the backend
    bits: int = 4
    group_size: int = 0  # gptq: input columns per scale; 0 = not applicable

    @property
    def label(self) -> str:
        """The profile's ``quant`` field: ``nf4`` or ``gptq-w4g64``."""
        if self.name == "gptq":
            return f"gptq-w{self.bits}g{self.group_size}"
        return self.name


NF4 = QuantMethod(name="nf4", module="bitsandbytes", extra="nf4")
GPTQ = QuantMethod(name="gptq", module="gptqmodel", extra="gptq", group_size=128)
METHODS = {method.name: method for method in (NF4, GPTQ)}


def parse_method(name: str) -> QuantMethod:
    """The method called ``name`` (``nf4`` or ``gptq``).

    >>> parse_method("nf4").label
    'nf4'
    """
    if name not in METHODS:
        raise SpecplanError(f"unknown quantization method {name!r}; use one of {', '.join(METHODS)}")
    return METHODS[name]


def method_of_label(label: str) -> QuantMethod:
    """The method a profile's ``quant`` label names (``nf4``, ``gptq-w4g64``, ...).

    >>> method_of_label("gptq-w4g64").name
    'gptq'
    """
    name = label.split("-", 1)[0]
    if name not in METHODS:
        raise SpecplanError(f"unknown quant {label!r} in the profile; known: none, nf4, gptq-w4gN")
    return METHODS[name]


def pick_group_size(input_widths: list[int], preferred: int = 128) -> int:
    """The largest group size (<= ``preferred``, from GROUP_SIZES) that divides every width.

    CPU int4 kernels (torch's ``_weight_int4pack_mm_for_cpu``, which GPTQModel's aten backend
    calls) need K divisible by the group size; SmolLM2-135M has K = 576, so 128 does not fit.

    >>> pick_group_size([576, 1536])
    64
    >>> pick_group_size([4096, 11008])
    128
    """
    for size in GROUP_SIZES:
        if size <= preferred and all(width % size == 0 for width in input_widths):
            return size
    raise SpecplanError(f"no GPTQ group size in {GROUP_SIZES} divides the layer widths {sorted(set(input_widths))}; "
                        "this model cannot use the CPU int4 kernel")


def normalize_quants(values: list[str] | None) -> list[str]:
    """``--quant`` values in order, duplicates dropped; ``["none"]`` when none were given.

    >>> normalize_quants(["nf4", "none", "nf4"])
    ['nf4', 'none']
    """
    ordered: list[str] = []
    for value in values or ["none"]:
        if value != "none":
            parse_method(value)  # an unknown method is bad input before anything loads
        if value not in ordered:
            ordered.append(value)
    return ordered
