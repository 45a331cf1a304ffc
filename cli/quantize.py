"""``specplan quantize MODEL --method gptq|nf4 [-o DIR]``: make the 4-bit checkpoint once.

Without ``-o`` it goes to the cache that ``specplan profile --quant`` and ``specplan run``
load from; with ``-o DIR`` to DIR (a Hugging Face directory: transformers loads it directly,
GPTQ through ``optimum`` + ``gptqmodel``, NF4 through ``bitsandbytes``).
"""

from __future__ import annotations

from specplan.cli.options import PROMPTS, resolve_dtype
from specplan.core.outputs import check_output_folder
from specplan.quant.methods import METHODS


def add_parser(commands) -> None:
    """Register the ``quantize`` subcommand on argparse ``commands``."""
    parser = commands.add_parser("quantize", help="make a 4-bit (GPTQ or NF4) checkpoint of MODEL, cached")
    parser.add_argument("model", help="MODEL: `default`, a .gguf file, a directory or a hub id")
    parser.add_argument("--method", required=True, choices=sorted(METHODS), help="gptq (GPTQModel) or nf4 (bitsandbytes)")
    parser.add_argument("-o", "--output", default=None, help="directory to write (default: the specplan cache)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                        help="NF4 compute dtype (auto = bfloat16); GPTQ kernels compute in bfloat16")
    parser.add_argument("--calibration-limit", type=PROMPTS, default=None,
                        help="GPTQ: Spec-Bench calibration prompts to use (default 40 of 120, all categories)")
    parser.set_defaults(handler="quantize")


def command(args) -> int:
    """Quantize (or find in the cache) and print where the checkpoint is."""
    if args.output:
        check_output_folder(args.output, flag="-o")
    from specplan.quant.checkpoint import quantize
    from specplan.models.load import quiet_transformers

    quiet_transformers()
    dtype = resolve_dtype(args.dtype)
    checkpoint = quantize(args.model, args.method, args.output, calibration_limit=args.calibration_limit, dtype=dtype)
    state = f"quantized in {checkpoint.seconds:.0f} s" if checkpoint.seconds else "already in the cache"
    print(f"specplan: {checkpoint.method.label} checkpoint of {args.model} {state}: {checkpoint.path}")
    return 0
