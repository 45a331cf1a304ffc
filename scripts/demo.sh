#!/usr/bin/env bash
# Fresh machine -> profile -> plan -> run on the default model (SmolLM2-135M-Instruct).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p out
.venv/bin/specplan profile --quick -o out/profile.yaml   # also writes out/plan.yaml
.venv/bin/specplan run out/plan.yaml --compare-plain --max-new-tokens 96 \
    --prompt "Summarise in three sentences why speculative decoding keeps the output of the large model unchanged."
