#!/usr/bin/env bash
# Build llama.cpp's C++ `llama-server` once and cache the static binary.
#
# Source: the llama.cpp tree vendored in the PyPI sdist of llama-cpp-python 0.3.36
# (recipe and timings in shared/reference/cpu_engines.md: ~8 min on 2 cores, 15 MB static binary).
# The binary is the real engine the telemetry tests scrape on loopback (`--metrics`).
#
# Output: $KVSCOPE_LLAMA_SERVER if set, else ${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/llama-server-0.3.36/llama-server
# Idempotent: exits at once when the binary already exists and runs.
set -euo pipefail

VERSION="0.3.36"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/kvscope"
OUT="${KVSCOPE_LLAMA_SERVER:-$CACHE_ROOT/llama-server-$VERSION/llama-server}"
PIP="${PIP:-python3 -m pip}"
JOBS="${JOBS:-2}"

if [[ -x "$OUT" ]] && "$OUT" --version >/dev/null 2>&1; then
    echo "llama-server already built: $OUT"
    exit 0
fi

for tool in cmake ninja c++ tar; do
    command -v "$tool" >/dev/null || { echo "build_llama_server.sh: '$tool' is missing (apt-get install -y cmake ninja-build g++)" >&2; exit 1; }
done

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
echo "fetching llama-cpp-python==$VERSION source distribution" >&2
$PIP download -q "llama-cpp-python==$VERSION" --no-deps --no-binary :all: -d "$WORK"
tar -xzf "$WORK"/llama_cpp_python-"$VERSION".tar.gz -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"

echo "configuring and building llama-server (Release, static, -j$JOBS)" >&2
cmake -S "$SRC" -B "$WORK/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DGGML_NATIVE=OFF >/dev/null
cmake --build "$WORK/build" --target llama-server -j "$JOBS"

mkdir -p "$(dirname "$OUT")"
cp "$WORK/build/bin/llama-server" "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "built $OUT" >&2
"$OUT" --version >&2 || true
