"""Sliding-window and hybrid layouts step for step against vLLM 0.33.0 (needs the oracle).

Runs every scenario of benchmarks/sim_scenarios_hybrid.py through the differential harness
(benchmarks/sim_vs_vllm.py with vllm_oracle_driver.py: vLLM's own Scheduler, KV manager and
block pool on CPU, multi-group ``KVCacheConfig``s) and fails on any step where scheduled
tokens, blocks in use, admissions, prefix hits, preemptions or finishes differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tests.oracle import vllm_python

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"


@pytest.mark.slow
@pytest.mark.integration
def test_hybrid_scenarios_match_vllm_step_by_step() -> None:
    python = vllm_python()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import sim_scenarios_hybrid as hybrid
    import sim_vs_vllm as diff

    cases = hybrid.scenarios(SHARED if SHARED.is_dir() else None)
    results = diff.check(cases, python)
    bad = [f"{name}: {why}" for name, _steps, _pre, _hits, _t, why in results if why]
    assert not bad, "\n".join(bad)
    by_name = {r[0]: r for r in results}
    assert len(results) >= 12
    # the scenarios exercise what they are named for: preemption, window-cache hits on V4
    assert by_name["swa32 b16, preemption"][2] > 0
    assert by_name["DeepSeek V4 groups, preemption"][2] > 0
    assert by_name["DeepSeek V4 groups, shared"][3] > 0
    assert by_name["swa128 b16, prefix families"][3] > 0
