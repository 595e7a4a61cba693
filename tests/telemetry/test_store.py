"""DuckDB store: batches, retention, export, and survival of a SIGKILL."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kvscope.errors import KvscopeError
from kvscope.telemetry.series import Sample
from kvscope.telemetry.store import Store

REPO = Path(__file__).resolve().parents[2]
RECORDING = Path(__file__).parent / "fixtures" / "nvml_recording.json"


def _batch(t0: float, n: int, metric: str = "m") -> list[Sample]:
    return [Sample(t0 + i, "gpu:0", metric, float(i)) for i in range(n)]


def test_append_query_and_series(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as st:
        assert st.append(_batch(0.0, 10)) == 10
        assert st.append([]) == 0
        st.append([Sample(20.0, "gpu:0", "m", float("nan"))])
        assert st.count() == 11
        ts, vs = st.series("m", "gpu:0")
        assert ts[:3] == [0.0, 1.0, 2.0] and vs[9] == 9.0
        assert vs[-1] != vs[-1]  # NaN kept as a missing value, not dropped


def test_reopen_keeps_rows(tmp_path: Path) -> None:
    p = tmp_path / "s.duckdb"
    with Store(p) as st:
        st.append(_batch(0.0, 5))
    with Store(p, read_only=True) as st:
        assert st.count() == 5


def test_downsample_replaces_old_raw_rows_by_bucket_means(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as st:
        st.append(_batch(0.0, 120))  # t = 0..119, value = t
        removed = st.downsample(older_than_s=60.0, bucket_s=30.0)
        assert removed == 60 - 2
        rows = st.query("SELECT t_s, value, res_s FROM samples WHERE res_s > 0 ORDER BY t_s")
        assert rows == [(0.0, 14.5, 30.0), (30.0, 44.5, 30.0)]
        assert st.count() == 60 + 2
        assert st.retain(newer_than_s=30.0) == 1
        with pytest.raises(KvscopeError):
            st.downsample(10.0, 0.0)


def test_export_parquet_and_csv(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as st:
        st.append(_batch(100.0, 10))
        assert st.export(tmp_path / "o.parquet", "parquet", since_s=105.0) == 5
        assert st.export(tmp_path / "o.csv", "csv") == 10
        with pytest.raises(KvscopeError):
            st.export(tmp_path / "o.x", "xml")
    table = pq.read_table(tmp_path / "o.parquet")
    assert table.column_names[0] == "t_s" and table.num_rows == 5
    assert table.column("t_s").to_pylist()[0] == 105.0
    with open(tmp_path / "o.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 10 and rows[0]["metric"] == "m"


def test_missing_store_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(KvscopeError):
        Store(tmp_path / "none.duckdb", read_only=True)


@pytest.mark.integration
@pytest.mark.slow
def test_sigkill_mid_run_loses_at_most_the_last_batch(tmp_path: Path) -> None:
    store = tmp_path / "k.duckdb"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    cmd = [
        sys.executable,
        "-m",
        "kvscope.cli.main",
        "watch",
        "--nvml-replay",
        str(RECORDING),
        "--interval",
        "0.1",
        "--flush",
        "0.3",
        "--store",
        str(store),
        "--log-batches",
        "--json",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reported = 0
    batches = 0
    deadline = time.monotonic() + 60
    assert proc.stderr is not None
    while batches < 4 and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if "committed" in line:
            batches = int(line.split("batch ")[1].split()[0])
            reported = int(line.split(", ")[1].split()[0])
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert batches >= 4, "watch never committed 4 batches"
    with Store(store, read_only=True) as st:
        rows = st.count()
        per_batch = rows / max(batches, 1)
        assert rows >= reported  # every batch reported committed is there
        assert rows <= reported + 3 * per_batch  # and nothing half-written beyond it
        used = st.query("SELECT count(*) FROM samples WHERE metric = 'gpu_memory_used_bytes'")
        assert used[0][0] >= batches  # real GPU samples, readable after the kill
