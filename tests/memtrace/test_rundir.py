"""The run directory: summary.json of kind memtrace and readable Parquet tables."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from kvscope.memtrace.analysis import analyze
from kvscope.memtrace.load import load_snapshot
from kvscope.memtrace.rundir import write_run


def test_run_directory(snaps: dict[str, Path], tmp_path: Path) -> None:
    cols, _ = load_snapshot(snaps["oom"])
    out = write_run(analyze(cols, source="oom.pickle"), cols, tmp_path / "run", max_points=50)
    s = json.loads((out / "summary.json").read_text())
    assert s["kind"] == "memtrace"
    assert s["end_external_frag"] == 0.5 and s["ooms"] == 1
    assert s["config"]["source"] == "oom.pickle"
    tl = pq.read_table(out / "timeline.parquet")
    assert tl.column_names[0] == "t_s" and tl.num_rows <= 50
    assert max(tl.column("allocated_bytes").to_pylist()) == 30 << 20
    assert pq.read_table(out / "ooms.parquet").column("largest_free_bytes").to_pylist() == [
        10 << 20
    ]
    assert pq.read_table(out / "leaks.parquet").num_rows == 0
    assert pq.read_table(out / "heatmap.parquet").num_rows == 64 * 128
    assert pq.read_table(out / "segments.parquet").num_rows == 2
    assert pq.read_table(out / "fragmentation.parquet").num_rows >= 5
