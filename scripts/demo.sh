#!/usr/bin/env bash
# Fresh machine -> profile -> plan -> run on the default model (SmolLM2-135M-Instruct).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p out
# Calibrated on edits (the prompt below is one): on Spec-Bench's chat prompts a draft does not beat
# llama.cpp's own plain decoding of this small model, and the plan would be plain decoding.
.venv/bin/specplan profile --quick --workload humaneval-edit -o out/profile.yaml   # also writes out/plan.yaml
# A prompt whose answer repeats much of its text, so the plan's drafters have something to look up.
.venv/bin/specplan run out/plan.yaml --compare-plain --max-new-tokens 96 \
    --prompt "Fix the spelling in this paragraph and print the corrected paragraph: Speculative decodeing lets a small draft modle propose several tokens, and the large target modle checks them all in one forward pass. The output is exactly what the target would have writen alone, only faster."
