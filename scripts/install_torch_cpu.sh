#!/usr/bin/env bash
# Install a CPU-only torch (what `kvscope comm` and `kvscope memtrace record` need on a box
# without a GPU, and what their tests run on), and refuse to install a CUDA build.
#
# On Linux x86_64 the default package index serves torch as the CUDA build: the torch wheel
# plus about twenty nvidia-*, cuda-* and triton wheels, several GB (checked for torch 2.13.0
# with `pip install --dry-run --report`). The CPU build (version 2.13.0+cpu, ~190 MB, no
# nvidia-* dependency) lives on PyTorch's own CPU-only wheel index: the index URL shown by
# the install selector on PyTorch's "Get Started" page for Compute Platform "CPU". Pass it
# as TORCH_INDEX_URL (make install-torch-cpu TORCH_INDEX_URL=...). Without it, pip uses
# the indexes it is configured with (pip.conf, PIP_INDEX_URL, PIP_FIND_LINKS), which is
# right where those already hold the CPU build, and on macOS, where torch is CPU-only.
#
# Before anything is downloaded, pip's resolution is checked: if it would bring in any
# nvidia-*, cuda-* or triton package, the script stops and says what to pass instead.
#
# Environment: PY (the venv's python, required), TORCH_VERSION (default 2.13.0),
# TORCH_INDEX_URL (optional).
set -euo pipefail
: "${PY:?PY must name the python of the venv to install into}"
version="${TORCH_VERSION:-2.13.0}"
index="${TORCH_INDEX_URL:-}"

if "$PY" - "$version" <<'EOF' 2>/dev/null; then
import sys
import torch
ok = torch.version.cuda is None and torch.__version__.split("+")[0] == sys.argv[1]
sys.exit(0 if ok else 1)
EOF
  echo "install_torch_cpu: torch $version (CPU build) is already installed" >&2
  exit 0
fi

args=("torch==$version")
if [ -n "$index" ]; then
  args+=(--index-url "$index")
fi
report="$(mktemp)"
trap 'rm -f "$report"' EXIT
"$PY" -m pip install -q --dry-run --report "$report" "${args[@]}"
if ! "$PY" - "$report" <<'EOF'; then
import json
import sys

plan = json.load(open(sys.argv[1]))["install"]
names = sorted(p["metadata"]["name"].lower() for p in plan)
cuda = [n for n in names if n.startswith(("nvidia-", "cuda-")) or n == "triton"]
if cuda:
    print(
        f"install_torch_cpu: pip would install the CUDA build of torch ({len(cuda)} GPU "
        f"packages: {', '.join(cuda[:4])}, ...), several GB a CPU box cannot use.",
        file=sys.stderr,
    )
    sys.exit(1)
EOF
  echo "install_torch_cpu: pass PyTorch's CPU-only wheel index, e.g." \
    "make install-torch-cpu TORCH_INDEX_URL=<the CPU index URL of PyTorch's install selector>" >&2
  exit 1
fi
"$PY" -m pip install -q "${args[@]}"
"$PY" -c "import torch, sys; sys.exit(torch.version.cuda is not None)" || {
  echo "install_torch_cpu: the torch installed is a CUDA build" >&2
  exit 1
}
echo "install_torch_cpu: installed torch $version (CPU build)" >&2
