#!/usr/bin/env bash
# Build llama.cpp's own server (llama-server) for the bench's `llama-server*` peers and install it at
# $SPECPLAN_CACHE/bin/llama-server (default cache: ~/.cache/specplan).
#
# The source is llama-cpp-python's sdist, pinned to the version the llama.cpp backend uses (its
# vendor/llama.cpp is llama.cpp itself, MIT), downloaded with pip. Idempotent: a binary that already
# answers --version is kept. Not part of set-up or CI: only `specplan bench --baselines llama-server...`
# needs it. Needs cmake and a C++ compiler. Environment: SPECPLAN_CACHE, JOBS (default nproc),
# PYTHON (default .venv/bin/python, else python3), GGML_NATIVE (default ON).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="0.3.36"  # llama-cpp-python, as in scripts/setup.sh and constraints.txt
CACHE="${SPECPLAN_CACHE:-$HOME/.cache/specplan}"
SRC="$CACHE/llama-server-src"
BIN="$CACHE/bin/llama-server"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
    echo "build-llama-server: $BIN is already built ($("$BIN" --version 2>&1 | grep -m1 -i version || true))"
    exit 0
fi
for tool in cmake c++; do
    command -v "$tool" >/dev/null || { echo "build-llama-server: $tool is missing; install cmake and a C++ compiler" >&2; exit 1; }
done

LLAMA="$SRC/llama_cpp_python-$VERSION/vendor/llama.cpp"
if [ ! -f "$LLAMA/CMakeLists.txt" ]; then
    download="$(mktemp -d)"
    trap 'rm -rf "$download"' EXIT
    "$PYTHON" -m pip download -q --no-deps --no-binary :all: --dest "$download" "llama-cpp-python==$VERSION"
    mkdir -p "$SRC"
    tar -xzf "$download"/llama_cpp_python-"$VERSION".tar.gz -C "$SRC"
fi
[ -f "$LLAMA/CMakeLists.txt" ] || { echo "build-llama-server: no llama.cpp source at $LLAMA" >&2; exit 1; }

echo "build-llama-server: compiling llama-server from llama-cpp-python $VERSION's llama.cpp ($JOBS jobs; a few minutes, once)"
BUILD="$SRC/build"
cmake -S "$LLAMA" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE="${GGML_NATIVE:-ON}" -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF \
    > "$SRC/configure.log" 2>&1 || { tail -20 "$SRC/configure.log" >&2; exit 1; }
cmake --build "$BUILD" --target llama-server -j "$JOBS" > "$SRC/build.log" 2>&1 || { tail -30 "$SRC/build.log" >&2; exit 1; }
mkdir -p "$(dirname "$BIN")"
install -m 755 "$BUILD/bin/llama-server" "$BIN"
"$BIN" --version >/dev/null 2>&1 || { echo "build-llama-server: $BIN does not run" >&2; exit 1; }
echo "build-llama-server: installed $BIN"
