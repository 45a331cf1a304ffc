"""Tree shapes on Spec-Bench: plain vs sequence vs static, dynamic and grafted trees.

On N stratified Spec-Bench evaluation prompts with the default model, one run, methods
interleaved prompt by prompt (their order rotates from prompt to prompt so that drift of a
shared machine spreads evenly). Reported per category and overall: mean accepted tokens per
target forward (bonus included; plain decoding is 1 by definition), tokens/s (total new
tokens over total seconds), and how many outputs are token-identical to plain greedy (bf16
outputs may part at numerical near-ties; float32 must be identical).

The static tree is the planner's Sequoia DP tree (arXiv 2402.12374) for the drafter's
measured rank acceptance when ``--profile`` is given, else a fixed 8-node tree. The dynamic
tree is grown best-first (EAGLE-2, arXiv 2406.16858) under the same node budget; the graft
(arXiv 2605.20104) gives ``--graft-budget`` of those nodes to a retrieval drafter, which is
also run alone as a dynamic tree of the same budget (its drafting costs next to nothing).

    .venv/bin/python measurements/tree_shapes.py --limit 13 --max-new-tokens 64 --dtype bfloat16
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

from specplan.core.plan import StageShape
from specplan.core.quiet import quiet_libraries

quiet_libraries(verbose=False)  # before torch and the 4-bit backends import: no library chatter

import torch  # noqa: E402
from tqdm import tqdm

from specplan.core.drafter_spec import parse_drafter_spec
from specplan.core.prompts import spec_bench_split, stratified
from specplan.runtime.build import build_drafter, build_tree_drafter, eos_ids
from specplan.models.chat import encode_prompt
from specplan.runtime.drafters.base import SamplingConfig
from specplan.runtime.drafters.graft import GraftDrafter
from specplan.runtime.engine import SpeculativeEngine
from specplan.models.load import load_model, quiet_transformers

DEFAULT_STATIC = (-1, 0, 0, 1, 1, 2, 3, 5)  # 8 nodes, depth 4: a typical DP shape for p_1 ~ 0.4
NEAR_TIE = 0.5  # top-2 logit gap: a bf16 forward over n tokens differs from n decode steps by ~0.1-0.3


@torch.inference_mode()
def divergence_gap(model: torch.nn.Module, prompt_ids: list[int], output: list[int], reference: list[int]) -> float | None:
    """The target's top-2 logit gap where ``output`` first parts from ``reference`` (None: no such place)."""
    index = next((i for i, (a, b) in enumerate(zip(output, reference)) if a != b), None)
    if index is None:
        return None
    logits = model(input_ids=torch.tensor([prompt_ids + reference[:index]]), use_cache=False).logits[0, -1].float()
    top = torch.topk(logits, 2).values  # [2]
    return float(top[0] - top[1])


def static_parents(args) -> tuple[int, ...]:
    """The planner's DP tree for the drafter's profiled rank acceptance, or the default shape."""
    if not args.profile:
        return DEFAULT_STATIC
    from specplan.planner.tree_dp import best_tree
    from specplan.core.profile import load_profile

    entry = load_profile(args.profile).acceptance_for(parse_drafter_spec(args.drafter).id, "target", 0.0)
    if entry is None or not entry.rank_accept:
        raise SystemExit(f"{args.profile} has no rank_accept for {args.drafter}; profile it first")
    return best_tree(entry.rank_accept, args.budget, args.depth).parents


def build_engines(args, target, device) -> dict[str, SpeculativeEngine]:
    """One engine per method, all over the same target weights."""
    spec = parse_drafter_spec(args.drafter)
    eos = eos_ids(target)
    sequence = build_drafter(spec, target, device)
    network = sequence.model

    def model_tree():
        return build_tree_drafter(spec, target, device, network)

    retrieval = parse_drafter_spec(args.graft)
    dynamic = StageShape("tree", budget=args.budget, depth=args.depth, dynamic=True)
    return {
        "plain": SpeculativeEngine(target.model, device, eos),
        f"sequence g{args.gamma}": SpeculativeEngine(target.model, device, eos, sequence.drafter, args.gamma),
        "static tree": SpeculativeEngine(target.model, device, eos, model_tree(), tree=StageShape("tree", parents=static_parents(args))),
        "dynamic tree": SpeculativeEngine(target.model, device, eos, model_tree(), tree=dynamic),
        "grafted tree": SpeculativeEngine(target.model, device, eos, GraftDrafter(
            model_tree(), build_tree_drafter(retrieval, target, device), args.graft_budget), tree=dynamic),
        f"{retrieval.id} tree": SpeculativeEngine(target.model, device, eos, build_tree_drafter(retrieval, target, device),
                                                  tree=dynamic),
    }


def run(engines, target, prompts, max_new_tokens: int) -> list[dict]:
    """Rows: one per (prompt, method), methods interleaved and rotated."""
    greedy = SamplingConfig()
    names = list(engines)
    warm = encode_prompt(target.tokenizer, prompts[0].text)
    for engine in engines.values():
        engine.generate(warm, 4, greedy)
    rows = []
    for index, prompt in enumerate(tqdm(prompts, desc="tree shapes", unit="prompt")):
        prompt_ids = encode_prompt(target.tokenizer, prompt.text)
        order = names[index % len(names):] + names[: index % len(names)]
        results = {name: engines[name].generate(prompt_ids, max_new_tokens, greedy) for name in order}
        reference = list(results["plain"].token_ids)
        for name in names:
            result = results[name]
            identical = list(result.token_ids) == reference
            gap = None if identical else divergence_gap(target.model, prompt_ids, list(result.token_ids), reference)
            rows.append({"prompt_id": prompt.prompt_id, "category": prompt.category, "method": name,
                         "new_tokens": len(result.token_ids), "seconds": result.seconds,
                         "forwards": result.target_forwards, "committed": sum(result.committed_per_forward),
                         "identical": identical, "divergence_gap": gap})
    return rows


def summarise(rows: list[dict], names: list[str]) -> str:
    """Markdown: per category, accepted tokens per target forward and tokens/s of each method."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        groups[row["category"]].append(row)
    header = "| category | " + " | ".join(f"{name} acc/fwd, tok/s" for name in names) + " | fastest |"
    lines = [header, "|" + "---|" * (len(names) + 2)]
    for category, group in sorted(groups.items()) + [("all", rows)]:
        cells, speed = [], {}
        for name in names:
            mine = [row for row in group if row["method"] == name]
            accepted = sum(r["committed"] for r in mine) / max(1, sum(r["forwards"] for r in mine))
            speed[name] = sum(r["new_tokens"] for r in mine) / max(1e-9, sum(r["seconds"] for r in mine))
            cells.append(f"{accepted:.2f}, {speed[name]:.1f}")
        lines.append(f"| {category} | " + " | ".join(cells) + f" | {max(speed, key=speed.get)} |")
    prompts = len(rows) // len(names)
    lines.append("")
    lines.append(f"token-identical to plain greedy (else: diverging at a near-tie, top-2 logit gap < {NEAR_TIE}):")
    for name in names:
        mine = [row for row in rows if row["method"] == name]
        ties = sum(1 for r in mine if not r["identical"] and r["divergence_gap"] is not None and r["divergence_gap"] < NEAR_TIE)
        lines.append(f"  {name}: identical {sum(r['identical'] for r in mine)}/{prompts}, near-tie {ties}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="default")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--limit", type=int, default=20, help="Spec-Bench evaluation prompts (stratified)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--drafter", default="layerskip:20", help="model drafter SPEC for every tree and the sequence")
    parser.add_argument("--gamma", type=int, default=3, help="sequence stage length")
    parser.add_argument("--budget", type=int, default=8, help="tree nodes, root included")
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--graft", default="recycle", help="retrieval drafter SPEC grafted into the dynamic tree")
    parser.add_argument("--graft-budget", type=int, default=3)
    parser.add_argument("--profile", default=None, help="profile.yaml: take the static tree from the planner's DP")
    parser.add_argument("--json", default=None, help="also write the per-prompt rows here")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    quiet_transformers()
    torch.manual_seed(0)
    device = torch.device("cpu")
    target = load_model(args.target, args.dtype)
    engines = build_engines(args, target, device)
    prompts = stratified(spec_bench_split("evaluation"), args.limit)
    rows = run(engines, target, prompts, args.max_new_tokens)
    print(f"{args.target} {args.dtype}, {torch.get_num_threads()} threads, {len(prompts)} Spec-Bench evaluation prompts, {args.max_new_tokens} new tokens, "
          f"drafter {args.drafter}; static parents {static_parents(args)}; dynamic budget {args.budget} depth "
          f"{args.depth}; graft {args.graft} x{args.graft_budget}")
    print(summarise(rows, list(engines)))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
