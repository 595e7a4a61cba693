"""vLLM 0.33's own KV sizing code agrees with kvscope (needs the oracle venv; skips without)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ORACLE_PY = Path(os.environ.get("KVSCOPE_VLLM_ORACLE_PY", "/work/vllm-oracle-venv/bin/python"))
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_oracle.py"


@pytest.mark.integration
@pytest.mark.slow
def test_vllm_get_kv_cache_configs_matches_kvscope() -> None:
    if not ORACLE_PY.exists():
        pytest.skip(f"no vLLM oracle venv at {ORACLE_PY} (see shared/reference/cpu_engines.md)")
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu"}
    proc = subprocess.run(
        [str(ORACLE_PY), str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("OK", "BAD"))]
    assert len(lines) >= 7, proc.stderr[-2000:]
    assert all(ln.startswith("OK") for ln in lines), "\n".join(lines)
    assert proc.returncode == 0
