"""Sliding-window and hybrid layouts step for step against vLLM 0.33.0 (needs the oracle).

Runs every scenario of benchmarks/sim_scenarios_hybrid.py through the differential harness
(benchmarks/sim_vs_vllm.py with vllm_oracle_driver.py, vLLM's own Scheduler, KV manager and
block pool on CPU) and fails on the first step where scheduled tokens, blocks in use,
admissions, prefix hits, preemptions or finishes differ. Slow: one vLLM import per scenario.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"


def oracle_python() -> str:
    """The vLLM oracle interpreter, through tests/oracle.py when the checkout has it."""
    try:
        from tests.oracle import vllm_python  # type: ignore[import-not-found]
    except ImportError:
        env = os.environ.get("KVSCOPE_VLLM_PYTHON")
        path = Path(env) if env else Path.home() / ".cache/kvscope/vllm-oracle-0.33.0/bin/python"
        if not path.exists():
            pytest.skip(f"no vLLM 0.33.0 oracle at {path} (set KVSCOPE_VLLM_PYTHON)")
        return str(path)
    return str(vllm_python())


@pytest.mark.slow
@pytest.mark.integration
def test_hybrid_scenarios_match_vllm_step_by_step() -> None:
    python = oracle_python()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import sim_scenarios_hybrid as hybrid
    import sim_vs_vllm as diff

    scenarios = hybrid.scenarios(SHARED if SHARED.is_dir() else None)
    assert len(scenarios) >= 12
    failures = []
    for name, w, s in scenarios:
        diverged = diff.compare(diff.run_sim(w, s), diff.run_vllm(w, s, python))
        if diverged is not None:
            failures.append(f"{name}: {diverged}")
    assert not failures, "\n".join(failures)
