"""Speculative decoding step for step against vLLM 0.33.0's own scheduler (needs the oracle).

Every scenario of benchmarks/sim_scenarios_spec.py (k = 1, 3, 5; acceptance 0, 0.7, 1; MTP,
EAGLE, n-gram and draft-model drafters; preempting pools; prefix caching on and off) runs
through vLLM's real ``Scheduler`` with kvscope's own acceptance decisions fed back; the
scheduled tokens, verified drafts, blocks in use, admissions, preemptions and finishes must
agree at every step.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _oracle() -> str:
    try:
        sys.path.insert(0, str(ROOT / "tests"))
        from oracle import vllm_python  # the lead's helper, once it is in main

        return str(vllm_python())
    except ImportError:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        default = cache / "kvscope" / "vllm-oracle-0.33.0" / "bin" / "python"
        path = Path(os.environ.get("KVSCOPE_VLLM_PYTHON") or default)
        if not path.exists():
            pytest.skip(f"no vLLM 0.33.0 oracle at {path} (make install-test builds it)")
        return str(path)


@pytest.mark.slow
@pytest.mark.integration
def test_spec_decode_scenarios_match_vllm_step_by_step() -> None:
    python = _oracle()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import sim_scenarios_spec
    import sim_vs_vllm as diff

    cases = sim_scenarios_spec.scenarios(None)
    assert len(cases) >= 5
    if hasattr(diff, "run_vllm_many"):
        ref = diff.run_vllm_many(cases, python)
    else:
        ref = {name: diff.run_vllm(w, s, python) for name, w, s in cases}
    for name, w, s in cases:
        sim = diff.run_sim(w, s)
        assert sum(sum(r["drafts"].values()) for r in sim) > 0, name
        assert diff.compare(sim, ref[name]) is None, name
