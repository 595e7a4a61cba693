"""A vLLM release's own ``batches_to_profile`` against kvscope.plan.adaptive_verification.

Runs in the vLLM-on-CPU oracle venv (tests/oracle.py) with the Python sources of a release
that has DSpark adaptive verification put first on the path (unpack ``vllm/*.py`` of its PyPI
wheel), as ``benchmarks/vllm_oracle_dsv4.py`` does:

    VLLM_TARGET_DEVICE=cpu PYTHONPATH=T ~/.cache/kvscope/vllm-oracle-0.33.0/bin/python \\
        benchmarks/vllm_oracle_adaptive.py

Calls ``AdaptiveVerificationManager.batches_to_profile`` (vllm/v1/worker/gpu/spec_decode/
adaptive_verification.py) on a stand-in manager for capture limits up to 4,096 and batches of
at least the limit (the capture list never passes ``max_num_batched_tokens``), and compares the
token counts it runs past the capture limit with :func:`eager_sizes`. Checked with the 0.30.0
and 0.31.0 wheels. Prints one line and exits 1 on any mismatch.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from types import SimpleNamespace as NS

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.append(str(Path(__file__).resolve().parents[1] / "src"))

import vllm
from vllm.v1.worker.gpu.spec_decode.adaptive_verification import (
    AdaptiveVerificationManager,
)

from kvscope.plan.adaptive_verification import eager_sizes


def engine(limit: int, tokens: int) -> list[int]:
    fake = NS(req_states=NS(max_num_batched_tokens=tokens))
    runs = AdaptiveVerificationManager.batches_to_profile(fake, [limit])  # type: ignore[arg-type]
    return sorted({b["num_tokens"] for b in runs} - {limit})


def main() -> int:
    rng = random.Random(0)
    cases = [(512, 8192), (1024, 16384), (512, 2048), (8192, 8192), (96, 8192)]
    for _ in range(300):
        limit = rng.randint(1, 4096)
        cases.append((limit, rng.randint(limit, 65536)))
    bad = [(lim, tok) for lim, tok in cases if engine(lim, tok) != list(eager_sizes(lim, tok))]
    print(f"{'OK ' if not bad else 'BAD'} vllm {vllm.__version__}: {len(cases)} cases, {bad[:5]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
