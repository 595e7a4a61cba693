from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from browser import report_specs
from kvscope.report import build_report, write_report
from kvscope.report.charts import decimate
from kvscope.report.vega import javascript_bundle


def test_report_has_plots_units_and_peaks(sim_run: Path, tmp_path: Path) -> None:
    html = build_report([sim_run])
    specs = report_specs(html)
    assert len(specs) >= 5
    assert specs["TTFT distribution"]["layer"][0]["encoding"]["x"]["title"] == "TTFT (ms)"
    kv = specs["KV cache usage"]
    assert kv["layer"][0]["encoding"]["x"]["title"] == "time since start (s)"
    assert kv["layer"][0]["encoding"]["y"]["title"] == "KV usage (% of capacity)"
    assert re.search(r"peak 90% at", json.dumps(kv["title"]))  # 0.5 + 0.4 at the crest
    assert "SLO TTFT P99 200 ms" in json.dumps(specs["TTFT distribution"])


def test_page_loads_nothing_from_elsewhere(sim_run: Path) -> None:
    html = build_report([sim_run])
    assert html.count("<script>") == 2  # the library, then the loop that draws the charts
    page = html.replace(javascript_bundle().replace("</script", "<\\/script"), "")
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", page)
    assert not re.search(r"""import\s*\(|@import|url\(\s*["']?https?:""", page)


def test_side_by_side_and_partial_runs(sim_run: Path, tmp_path: Path, make_run: Any) -> None:
    partial = make_run(tmp_path / "sim-b", seed=1, partial=True)
    html = build_report([sim_run, partial])
    assert "summary.json is missing" in html
    assert "run was interrupted" in html
    assert "sim-a" in html and "sim-b" in html
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "summary.json").write_text("{not json")
    out = write_report([damaged], tmp_path / "r.html")
    assert "summary.json is not valid JSON" in out.read_text()


def test_a_folder_without_runs_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "notes").mkdir(parents=True)
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvscope.cli.main",
            "report",
            str(empty),
            "--out",
            str(tmp_path / "r.html"),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "holds no kvscope run" in bad.stderr
    assert not (tmp_path / "r.html").exists()


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


def test_decimation_keeps_peaks() -> None:
    import numpy as np

    x = np.arange(100_000, dtype=float)
    y = np.zeros_like(x)
    y[71_234] = 5.0
    dx, dy, down = decimate(x, y, 1000)
    assert down and dx.size <= 1000 and dy.max() == 5.0
    assert dx[int(np.argmax(dy))] == 71_234.0


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
    specs = report_specs(html)
    assert "KV cache usage" in specs and "Requests running" in specs
    assert re.search(r"peak 50% at", json.dumps(specs["KV cache usage"]["title"]))
