"""Where a server's greedy answers at concurrency C part from its own at concurrency 1, and whether each
place is a near-tie: the target's top-2 logit gap there (runtime/lossless.py; docs/backends.md, "What
lossless means here").

Reads the ``results.json`` of ``measurements/serve_http.py`` (a server measured at concurrency 1 and at
C > 1), re-tokenizes both answers of every prompt whose texts differ, finds the first token where they
part and computes the gap with the plan's target on llama.cpp after the chat prompt and the common
tokens (one forward, fast numerics as the server ran).

    .venv/bin/python measurements/serve_gaps.py --plan profiles/transfer-qwen/plan-edit/plan.yaml \
        --results profiles/serve-qwen/xeon-edit-c14-load/results.json --workload humaneval-edit
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specplan.core.workloads import workload_split
from specplan.models.chat import encode_messages
from specplan.runtime.lossless import NEAR_TIE, divergence_gap, first_divergence


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--results", type=Path, required=True)
    parser.add_argument("--workload", default="humaneval-edit")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from specplan.api import Runner

    results = json.loads(args.results.read_text())
    prompts = {prompt.prompt_id: prompt for prompt in workload_split(args.workload, "evaluation")}
    runner = Runner.open(args.plan, threads=args.threads).plan_runner
    tokenizer, session = runner.target.tokenizer, runner.engine.target
    for key, value in results.items():
        name, concurrency = key.split("@")
        alone = results.get(f"{name}@1")
        if concurrency == "1" or alone is None:
            continue
        first = {row["prompt_id"]: row["text"] for row in alone["rows"]}
        gaps = []
        for row in value["rows"]:
            reference_text = first.get(row["prompt_id"])
            if reference_text is None or reference_text == row["text"]:
                continue
            reference = tokenizer(reference_text, add_special_tokens=False)["input_ids"]
            output = tokenizer(row["text"], add_special_tokens=False)["input_ids"]
            index = first_divergence(reference, output)
            prompt_ids = encode_messages(tokenizer, [{"role": "user", "content": prompts[row["prompt_id"]].text}])
            gap = divergence_gap(session, prompt_ids, reference, index)
            gaps.append(gap)
            print(f"{key} prompt {row['prompt_id']}: parts at token {index} "
                  f"({tokenizer.decode(reference[index:index + 1])!r} alone, {tokenizer.decode(output[index:index + 1])!r} "
                  f"at {concurrency}); top-2 gap {gap:.4f}{' (near-tie)' if gap < NEAR_TIE else ''}", flush=True)
        ties = sum(gap < NEAR_TIE for gap in gaps)
        print(f"{key}: {len(value['rows']) - len(gaps)} identical, {ties} near-ties (gap < {NEAR_TIE}), "
              f"{len(gaps) - ties} other", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
