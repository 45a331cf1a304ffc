"""Whether a divergence the bench did not call a near-tie is the kernels' arithmetic: the target's two tokens
at that position, decoded at each verify width.

On llama.cpp with fast numerics a decode of n tokens is not bit-identical to n one-token decodes
(docs/backends.md), so the logits at one position depend on how many tokens the forward that computed them
held. The bench names a divergence a near-tie where the target's top-2 gap there is under ``NEAR_TIE``
(runtime/lossless.py). For each divergence of a method at or above it, this decodes the reference's text up
to that position once per width: the last ``w`` tokens in one decode after the rest, as a verify of ``w``
tokens would (a chain of ``w - 1`` drafts ending there). It prints, per width, the reference token's logit
less the method's token's: positive where that width decodes the reference's token, negative where it
decodes the method's. A divergence whose token no width chooses is not explained by the widths. The bench
names the narrowest such width itself (its rows' ``flip_width``: runtime/lossless.py ``width_flip``); this
prints every width's margin.

    [PYTHONPATH=BUILD] .venv/bin/python measurements/width_flip.py PLAN REPORT_DIR --method plan:edit [--all]

``PLAN``: the plan the report benched (its target, numerics and build: run it with the llama.cpp build the
report used). ``--all``: every divergence, near-ties too.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specplan.core.quiet import quiet_libraries

quiet_libraries(verbose=False)  # before torch and transformers are imported

from specplan.api import Runner  # noqa: E402
from specplan.core.workloads import workload_split  # noqa: E402
from specplan.models.chat import encode_prompt  # noqa: E402
from specplan.runtime.lossless import NEAR_TIE, VERIFY_WIDTHS as WIDTHS, row_at_width  # noqa: E402

from replay_lookup import _workload, read_report  # noqa: E402  (measurements/replay_lookup.py)


def margins(session, prefix: list[int], reference: int, output: int) -> dict[int, float]:
    """Per width w: the reference token's logit less the output's, after ``prefix`` whose last w tokens are
    decoded together (the rest first)."""
    found = {}
    for width in (w for w in WIDTHS if w <= len(prefix)):
        row = row_at_width(session, prefix, width)
        found[width] = round(float(row[reference] - row[output]), 3)
    session.reset()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan")
    parser.add_argument("report", type=Path)
    parser.add_argument("--method", default="plan")
    parser.add_argument("--reference", default="plain-runtime")
    parser.add_argument("--all", action="store_true", help="near-ties too")
    args = parser.parse_args()
    report = read_report(args.report)
    runner = Runner.open(args.plan).plan_runner
    session = runner.engine.target
    prompts = {prompt.prompt_id: prompt for prompt in workload_split(_workload(report), "evaluation")}
    references = {row["prompt_id"]: row["token_ids"] for row in report["rows"] if row["method"] == args.reference}
    print("| prompt | position | top-2 gap | reference / method token | " + " | ".join(f"w={w}" for w in WIDTHS) + " |")
    print("|---|---:|---:|---|" + "---:|" * len(WIDTHS))
    for row in report["rows"]:
        gap = row["divergence_gap"]
        if row["method"] != args.method or row["identical"] or (not args.all and gap is not None and gap < NEAR_TIE):
            continue
        index, reference = row["divergence_index"], references[row["prompt_id"]]
        if index >= min(len(reference), len(row["token_ids"])):
            continue  # one output ends where the other goes on: no two tokens to compare
        prefix = encode_prompt(runner.target.tokenizer, prompts[row["prompt_id"]].text) + list(reference[:index])
        found = margins(session, prefix, reference[index], row["token_ids"][index])
        cells = [f"{found[w]:+.3f}" if w in found else "" for w in WIDTHS]
        print(f"| {row['prompt_id']} | {index} | {gap:.3f} | {reference[index]} / {row['token_ids'][index]} | "
              + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
