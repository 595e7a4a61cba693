"""Step-exact agreement with vLLM 0.33.0's own scheduler, on every differential scenario.

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
    # the scenarios exercise what they are named for
    by_name = {r[0]: r for r in results}
    assert by_name["priority with ties, preemption storm"][2] >= 30
    assert by_name["shared prefixes"][3] > 0
    assert len(results) >= 16
