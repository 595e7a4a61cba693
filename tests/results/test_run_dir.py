from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from kvscope.results import REQUEST_SCHEMA, RequestRecord, RunDir, read_summary, read_table


def _rec(i: int) -> dict[str, object]:
    return RequestRecord(f"r{i}", i * 0.1, 100, 10, 0, i * 0.1, i * 0.1 + 0.05, i * 0.1 + 0.5).row()


def test_tables_and_summary_round_trip(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run", "simulate")
    with run.table("requests", REQUEST_SCHEMA) as t:
        t.append_rows([_rec(i) for i in range(5)])
        t.append_rows([_rec(i) for i in range(5, 8)])
    run.write_summary({"model": "x", "seed": 7}, {"ttft_p99_s": 0.05, "nan_value": float("nan")})
    table = read_table(run.path, "requests")
    assert table is not None and table.num_rows == 8
    assert table.column("request_id").to_pylist()[-1] == "r7"
    assert not (run.path / "requests.arrows").exists()
    s = read_summary(run.path)
    assert s is not None
    assert s["kind"] == "simulate" and s["config"]["seed"] == 7
    assert s["nan_value"] is None  # NaN is not JSON
    assert read_table(run.path, "steps") is None


def test_killed_writer_keeps_every_complete_batch(tmp_path: Path) -> None:
    script = f"""
import sys, time
sys.path.insert(0, {str(Path(__file__).parents[2] / "src")!r})
from kvscope.results import REQUEST_SCHEMA, RequestRecord, RunDir
run = RunDir({str(tmp_path / "run")!r}, "bench")
t = run.table("requests", REQUEST_SCHEMA)
for b in range(1000):
    t.append_rows([RequestRecord(f"r{{b}}-{{i}}", 0.0, 1, 1).row() for i in range(10)])
    print(b, flush=True)
    time.sleep(0.01)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen = 0
    deadline = time.time() + 30
    while seen < 20 and time.time() < deadline:
        seen = int(proc.stdout.readline()) + 1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    table = read_table(tmp_path / "run", "requests")
    assert table is not None
    assert table.num_rows >= seen * 10  # nothing reported written was lost
    assert table.num_rows % 10 == 0


def test_torn_last_batch_is_dropped_not_fatal(tmp_path: Path) -> None:
    run = RunDir(tmp_path, "bench")
    t = run.table("requests", REQUEST_SCHEMA)
    t.append_rows([_rec(i) for i in range(3)])
    t.append_rows([_rec(i) for i in range(3, 6)])
    stream = tmp_path / "requests.arrows"
    data = stream.read_bytes()
    stream.write_bytes(data[:-40])  # tear the second batch
    table = read_table(tmp_path, "requests")
    assert table is not None and table.num_rows == 3


def test_reader_ignores_unknown_columns(tmp_path: Path) -> None:
    schema = REQUEST_SCHEMA.append(pa.field("future_column", pa.float64()))
    run = RunDir(tmp_path, "simulate")
    with run.table("requests", schema) as t:
        t.append_rows([{**_rec(0), "future_column": 1.0}])
    table = read_table(tmp_path, "requests")
    assert table is not None
    assert set(REQUEST_SCHEMA.names) <= set(table.column_names)


def test_bad_summary_is_one_clear_error(tmp_path: Path) -> None:
    from kvscope.errors import KvscopeError

    (tmp_path / "summary.json").write_text("{oops")
    with pytest.raises(KvscopeError, match="not valid JSON"):
        read_summary(tmp_path)
    assert json.loads("{}") == {}
