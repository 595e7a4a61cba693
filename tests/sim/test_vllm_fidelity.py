"""Step-exact agreement with vLLM 0.33.0's own scheduler (needs a vLLM environment).

The vLLM side runs in a separate environment (shared/reference/cpu_engines.md); set
``KVSCOPE_VLLM_PYTHON`` to its interpreter to run this test. It is kept out of the default
run because importing vLLM takes 10-40 s and 2 GB of packages.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.integration
def test_preemption_and_prefix_scenarios_match_vllm_step_by_step() -> None:
    python = os.environ.get("KVSCOPE_VLLM_PYTHON")
    if not python or not Path(python).exists():
        pytest.skip("set KVSCOPE_VLLM_PYTHON to a Python with vllm==0.33.0 (cpu_engines.md)")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import sim_vs_vllm as diff

    for name, w, s in diff.scenarios(None):
        if name in ("preemption-forcing", "shared prefixes, tiny pool"):
            assert diff.compare(diff.run_sim(w, s), diff.run_vllm(w, s, python)) is None, name
