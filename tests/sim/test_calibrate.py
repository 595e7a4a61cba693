"""Calibration recovers a known cost model from a run directory the simulator wrote."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvscope.errors import KvscopeError
from kvscope.sim import SimConfig, simulate
from kvscope.sim.calibrate import calibrate_run_dir
from kvscope.sim.cost import CostCoefficients, CostModel
from kvscope.sim.run import build_pool
from kvscope.workload import build_workload


def test_fit_reproduces_known_coefficients(tmp_path: Path) -> None:
    truth = CostCoefficients(0.006, 0.35, 0.55, "truth")
    truth.save(tmp_path / "truth.json")
    w = build_workload(
        arrival="poisson:rate=8",
        num_requests=600,
        prompt_len="uniform:min=100,max=600",
        output_len="uniform:min=50,max=400",
        seed=2,
    )
    simulate(w, SimConfig(cost_file=str(tmp_path / "truth.json"))).write(tmp_path / "run")
    fit = calibrate_run_dir(tmp_path / "run", SimConfig())
    assert fit.report["tpot_mape"] < 0.05
    # what decode TPOT identifies: the step time over the batches that occurred (~8-40
    # requests of a few hundred tokens each at this load)
    _, _, terms, _ = build_pool(SimConfig())
    b = np.array([8.0, 20.0, 40.0])
    c = b * 500.0
    want = CostModel(terms, truth).step_times(b, c)
    got = CostModel(terms, fit.coefficients).step_times(b, c)
    assert np.allclose(got, want, rtol=0.08)


def test_too_few_requests_is_an_error(tmp_path: Path) -> None:
    w = build_workload(arrival="poisson:rate=8", num_requests=3, seed=1)
    simulate(w, SimConfig()).write(tmp_path / "run")
    with pytest.raises(KvscopeError, match="at least 10"):
        calibrate_run_dir(tmp_path / "run", SimConfig())
