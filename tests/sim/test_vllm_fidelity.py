"""Step-exact agreement with vLLM 0.33.0's own scheduler, on every differential scenario:
full attention (FCFS and priority), window layouts (sliding windows, several windows,
DeepSeek V4's groups, under ``--window-model exact``) and speculative decoding.

vLLM runs in the oracle environment (tests/oracle.py); ``benchmarks/sim_vs_vllm.py`` builds the
scenarios and drives both sides (one vLLM process for all of them). Any divergence fails with
the first step that differs.
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
def test_every_scenario_matches_vllm_step_by_step() -> None:
    python = vllm_python()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import sim_vs_vllm as diff

    cases = diff.scenarios(SHARED if SHARED.is_dir() else None)
    results = diff.check(cases, python)
    bad = [f"{name}: {why}" for name, _steps, _pre, _hits, _t, why in results if why]
    assert not bad, "\n".join(bad)
    # the scenarios exercise what they are named for: preemption storms, prefix hits,
    # window-cache hits on DeepSeek V4's groups, drafts verified
    by_name = {r[0]: r for r in results}
    assert by_name["priority with ties, preemption storm"][2] >= 30
    assert by_name["shared prefixes"][3] > 0
    assert by_name["swa32 b16, preemption"][2] > 0
    assert by_name["DeepSeek V4 groups, preemption"][2] > 0
    assert by_name["DeepSeek V4 groups, shared"][3] > 0
    assert by_name["swa128 b16, prefix families"][3] > 0
    # Gemma 3 27B's six sliding groups of one window: preempted and hit
    assert by_name["swa1024 x6 b16 (Gemma 3 27B groups)"][2] > 0
    assert by_name["swa1024 x6 b16, shared, preemption"][3] > 0
    # one SlidingWindowSpec group, no full-history one (Phi-3-mini-4k, Mistral 7B v0.1)
    assert by_name["sliding-only w64 b16, tiny pool, preemption"][2] > 0
    assert by_name["sliding-only w64 b16, tiny pool, preemption"][3] > 0
    assert by_name["sliding-only w256 b16, preemption, no caching"][2] > 0
    assert by_name["sliding-only w256 b16, prefix families"][3] > 0
    families = {"swa": 0, "DeepSeek V4": 0, "spec": 0}
    for name in by_name:
        for key in families:
            families[key] += name.startswith(key)
    assert families["swa"] >= 8 and families["DeepSeek V4"] >= 4 and families["spec"] >= 9
    assert len(results) >= 53
    for name, w, s in cases:
        if name.startswith("spec"):
            assert sum(sum(r["drafts"].values()) for r in diff.run_sim(w, s)) > 0, name
