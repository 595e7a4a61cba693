#!/usr/bin/env bash
# Build the vLLM-on-CPU oracle environment once and cache it outside the repository.
#
# The differential tests (tests/sim/test_vllm_fidelity.py, tests/plan/test_vllm_oracle.py)
# drive vLLM 0.33.0's own v1 Scheduler, KVCacheManager and KV-cache sizing code in this
# environment and compare them with kvscope step for step. vLLM's full install pulls a CUDA
# stack of several GB and still cannot build a config without a device; the scheduler and KV
# manager only need the wheel's Python code, CPU torch and a short list of pure-Python
# dependencies, so the wheel goes in with --no-deps and the list below beside it (each
# entry is an import that vllm.v1.core.sched.scheduler, vllm.config or
# vllm.v1.core.kv_cache_utils makes at 0.33.0). xgrammar also goes in with --no-deps: its
# own dependencies would add a 1 GB triton that nothing here runs.
#
# Output: a venv at $KVSCOPE_VLLM_ORACLE if set, else
#   ${XDG_CACHE_HOME:-$HOME/.cache}/kvscope/vllm-oracle-0.33.0
# Idempotent: exits at once when that venv already imports vLLM's scheduler.
# Environment: PYTHON (the interpreter to build the venv from, default python3),
# TORCH_INDEX_URL (as for scripts/install_torch_cpu.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
VERSION="0.33.0"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/kvscope"
OUT="${KVSCOPE_VLLM_ORACLE:-$CACHE_ROOT/vllm-oracle-$VERSION}"
PYTHON="${PYTHON:-python3}"
PY="$OUT/bin/python"

probe() {
  VLLM_TARGET_DEVICE=cpu "$PY" -c \
    "import vllm, vllm.v1.core.sched.scheduler; assert vllm.__version__.startswith('$VERSION')" \
    >/dev/null 2>&1
}

if [[ -x "$PY" ]] && probe; then
  echo "vLLM oracle already built: $OUT"
  exit 0
fi

rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
"$PYTHON" -m venv "$OUT"
"$PY" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
PY="$PY" TORCH_VERSION=2.13.0 TORCH_INDEX_URL="${TORCH_INDEX_URL:-}" bash "$here/install_torch_cpu.sh"
echo "installing vllm==$VERSION (no dependencies) and what its scheduler imports" >&2
"$PY" -m pip install -q --no-deps "vllm==$VERSION" "xgrammar==0.2.8"
"$PY" -m pip install -q \
  packaging psutil pyzmq regex numpy msgspec "pydantic>=2.12" cbor2 \
  "transformers>=5.16.1,<5.21" aiohttp requests openai-harmony "openai>=2.25" pillow \
  pybase64 cachetools cloudpickle uvloop py-cpuinfo prometheus_client \
  "fastapi>=0.133,<0.137" partial-json-parser "llguidance>=1.7,<1.8" apache-tvm-ffi einops \
  sentencepiece protobuf tokenizers safetensors
if ! probe; then
  echo "build_vllm_oracle.sh: the venv at $OUT does not import vLLM's scheduler:" >&2
  VLLM_TARGET_DEVICE=cpu "$PY" -c "import vllm.v1.core.sched.scheduler" 2>&1 | tail -3 >&2
  exit 1
fi
echo "vLLM oracle built: $OUT"
