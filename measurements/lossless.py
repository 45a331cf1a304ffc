"""Lossless check on Spec-Bench evaluation prompts: speculative greedy output vs the
target's own greedy decoding, per drafter, in one run.

float32: every output must be token-identical. bfloat16: outputs may part at numerical
near-ties (a forward over n tokens is not bit-identical to n one-token forwards); each
divergence is reported with the target's top-2 logit gap at that point.

    .venv/bin/python measurements/lossless.py --dtype float32 --limit 20
    .venv/bin/python measurements/lossless.py --dtype bfloat16 --limit 20
"""

from __future__ import annotations

import argparse

from specplan.core.quiet import quiet_libraries

quiet_libraries(verbose=False)  # before torch and the 4-bit backends import: no library chatter

import torch  # noqa: E402

from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.prompts import spec_bench_split, stratified
from specplan.bench.run import divergence_gap
from specplan.runtime.lossless import NEAR_TIE, first_divergence
from specplan.runtime.build import build_drafter, eos_ids
from specplan.models.chat import encode_prompt
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.engine import SpeculativeEngine
from specplan.models.load import load_model, quiet_transformers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="default")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--drafter", action="append", default=None, help="SPEC=GAMMA, e.g. ngram:3=5")
    args = parser.parse_args()
    quiet_transformers()
    torch.manual_seed(0)
    device = torch.device("cpu")
    target = load_model(args.target, args.dtype)
    plain = SpeculativeEngine(target.model, device, eos_ids(target))
    engines = {}
    for item in args.drafter or ["ngram:3=5", "layerskip:26=3"]:
        spec, _, gamma = item.partition("=")
        built = build_drafter(parse_drafter_spec(spec), target, device)
        engines[item] = SpeculativeEngine(target.model, device, eos_ids(target), built.drafter, int(gamma or 4))
    prompts = stratified(spec_bench_split("evaluation"), args.limit)
    identical = {name: 0 for name in engines}
    near_ties = {name: 0 for name in engines}
    other = {name: [] for name in engines}
    for prompt in prompts:
        prompt_ids = encode_prompt(target.tokenizer, prompt.text)
        reference = list(plain.generate(prompt_ids, args.max_new_tokens, SamplingConfig()).token_ids)
        for name, engine in engines.items():
            output = list(engine.generate(prompt_ids, args.max_new_tokens, SamplingConfig()).token_ids)
            if output == reference:
                identical[name] += 1
                continue
            index = first_divergence(reference, output)
            gap = None if index is None else divergence_gap(target.model, prompt_ids, reference, index)
            if gap is not None and gap < NEAR_TIE:
                near_ties[name] += 1
            else:
                other[name].append((prompt.prompt_id, gap))
    print(f"{args.target} {args.dtype}: {len(prompts)} Spec-Bench evaluation prompts, {args.max_new_tokens} new tokens")
    for name in engines:
        print(f"  {name:>18}: identical {identical[name]}/{len(prompts)}, near-tie divergences {near_ties[name]}, "
              f"other divergences {len(other[name])} {other[name] or ''}")


if __name__ == "__main__":
    main()
