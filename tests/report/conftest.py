"""Run directories written with the real writer, for report tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from kvscope.results import REQUEST_SCHEMA, RequestRecord, RunDir

STEPS = pa.schema(
    [
        ("t_s", pa.float64()),
        ("kv_usage_frac", pa.float64()),
        ("running", pa.int64()),
        ("waiting", pa.int64()),
        ("preemptions", pa.int64()),
    ]
)


def make_run(path: Path, n: int = 400, seed: int = 0, partial: bool = False) -> Path:
    rng = np.random.default_rng(seed)
    run = RunDir(path, "simulate")
    req = run.table("requests", REQUEST_SCHEMA)
    rows = []
    for i in range(n):
        arr = i * 0.05
        ttft = float(rng.lognormal(-2, 0.5))
        out = int(rng.integers(2, 200))
        rows.append(
            RequestRecord(f"r{i}", arr, 100, out, 0, arr, arr + ttft, arr + ttft + out * 0.02).row()
        )
    req.append_rows(rows)
    steps = run.table("steps", STEPS)
    t = np.arange(0, 20, 0.1)
    usage = 0.5 + 0.4 * np.sin(t / 3) ** 2
    steps.append_columns(
        {
            "t_s": t,
            "kv_usage_frac": usage,
            "running": (usage * 100).astype(int),
            "waiting": np.zeros(t.size, dtype=int),
            "preemptions": (usage > 0.85).astype(int),
        }
    )
    if partial:
        return path  # killed before close: only the .arrows streams and no summary
    req.close()
    steps.close()
    run.write_summary(
        {"model": "test", "slo": {"ttft_s": 0.2}},
        {"ttft_p99_s": 0.3, "kv_usage_peak_frac": float(usage.max())},
    )
    return path


@pytest.fixture(name="make_run")
def make_run_fixture() -> Any:
    return make_run


@pytest.fixture
def sim_run(tmp_path: Path) -> Path:
    return make_run(tmp_path / "sim-a")
