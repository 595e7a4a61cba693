"""vLLM 0.33's own KV sizing code agrees with kvscope (the oracle venv, tests/oracle.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.oracle import vllm_python

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_oracle.py"


@pytest.mark.integration
@pytest.mark.slow
def test_vllm_get_kv_cache_configs_matches_kvscope() -> None:
    python = vllm_python()
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
    proc = subprocess.run(
        [python, str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("OK", "BAD"))]
    assert len(lines) >= 8, proc.stderr[-2000:]
    assert all(ln.startswith("OK") for ln in lines), "\n".join(lines)
    assert proc.returncode == 0
