from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from kvscope.report import build_report, write_report
from kvscope.report.svg import decimate, nice_ticks


def test_report_has_plots_units_and_peaks(sim_run: Path, tmp_path: Path) -> None:
    html = build_report([sim_run])
    assert html.count("<svg") >= 5
    assert "TTFT (s)" in html and "time since start (s)" in html
    assert "KV usage (% of capacity)" in html
    assert re.search(r"peak 90\.0% at", html)  # 0.5 + 0.4 at the sine's crest
    assert "SLO 0.2 s" in html
    assert "<script" not in html and "http://" not in html.replace(
        'xmlns="http://www.w3.org/2000/svg"', ""
    )


def test_side_by_side_and_partial_runs(sim_run: Path, tmp_path: Path, make_run: Any) -> None:
    partial = make_run(tmp_path / "sim-b", seed=1, partial=True)
    html = build_report([sim_run, partial])
    assert "summary.json is missing" in html
    assert "run was interrupted" in html
    assert "sim-a" in html and "sim-b" in html
    empty = tmp_path / "empty"
    empty.mkdir()
    out = write_report([empty], tmp_path / "r.html")
    assert "summary.json is missing" in out.read_text()


def test_cli_writes_file_and_reports_bad_path(sim_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    ok = subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", "report", str(sim_run), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert out.stat().st_size > 10_000
    bad = subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", "report", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "not a run directory" in bad.stderr


def test_nice_ticks_and_decimation_keep_peaks() -> None:
    assert nice_ticks(0, 97) == [0, 20, 40, 60, 80, 100]
    import numpy as np

    x = np.arange(100_000, dtype=float)
    y = np.zeros_like(x)
    y[71_234] = 5.0
    dx, dy, down = decimate(x, y, 1000)
    assert down and dx.size <= 1000 and dy.max() == 5.0


def test_watch_columns_with_source_prefixes_are_plotted(tmp_path: Path) -> None:
    import numpy as np
    import pyarrow as pa

    from kvscope.results import RunDir

    run = RunDir(tmp_path / "w", "watch")
    src = "engine:127.0.0.1:8000"
    schema = pa.schema(
        [
            ("t_s", pa.float64()),
            (f"{src}/kv_cache_usage_ratio", pa.float64()),
            (f"{src}/requests_running", pa.float64()),
        ]
    )
    t = np.arange(0, 10, 0.1)
    with run.table("server", schema) as tab:
        tab.append_columns(
            {
                "t_s": t,
                f"{src}/kv_cache_usage_ratio": 0.3 + 0.2 * np.sin(t),
                f"{src}/requests_running": np.round(4 + 3 * np.sin(t)),
            }
        )
    run.write_summary({}, {})
    html = build_report([run.path])
    assert 'aria-label="KV cache usage"' in html
    assert 'aria-label="Requests running and waiting"' in html
    assert re.search(r"peak 50\.0% at", html)
