"""Speculative decoding step for step against vLLM 0.33.0's own scheduler (needs the oracle).

Every scenario of benchmarks/sim_scenarios_spec.py (k = 1, 3, 5; acceptance 0, 0.7, 1; MTP,
EAGLE, n-gram and draft-model drafters; preempting pools; prefix caching on and off) runs
through vLLM's real ``Scheduler`` with kvscope's own acceptance decisions fed back; the
scheduled tokens, verified drafts, blocks in use, admissions, preemptions and finishes must
agree at every step.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tests.oracle import vllm_python

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.integration
def test_spec_decode_scenarios_match_vllm_step_by_step() -> None:
    python = vllm_python()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import sim_scenarios_spec
    import sim_vs_vllm as diff

    cases = sim_scenarios_spec.scenarios(None)
    assert len(cases) >= 5
    ref = diff.run_vllm_many(cases, python)
    for name, w, s in cases:
        sim = diff.run_sim(w, s)
        assert sum(sum(r["drafts"].values()) for r in sim) > 0, name
        assert diff.compare(sim, ref[name]) is None, name
