"""``kvscope report`` over damaged, partial and unusual run directories (issue #20).

Whatever a run directory holds, the report renders what is readable and lists what is not
(exit 0); only a path that is no run directory, or an ``--out`` that cannot be written, is
one ``kvscope: error:`` line with exit 2. Never a traceback, never a hang.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from browser import report_specs
from cli_helpers import one_error_line
from kvscope.bench.server_probe import SERVER_SCHEMA
from kvscope.cli.main import main
from kvscope.report import build_report
from kvscope.report.charts import wants_log
from kvscope.report.headline import plain
from kvscope.results import REQUEST_SCHEMA, RequestRecord, RunDir


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the block runs longer than ``seconds``."""

    def stop(*_: object) -> None:
        raise TimeoutError(f"took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = 0
    try:
        with time_limit(60):
            main(argv)
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def bench_run(path: Path, *, kv: bool = False, requests: int = 40) -> Path:
    """A run directory as ``kvscope bench`` writes it; ``kv=False``: a server without a KV
    gauge (llama.cpp without --metrics, TGI, a proxy): those columns are all null."""
    rd = RunDir(path, "bench")
    req = rd.table("requests", REQUEST_SCHEMA)
    rows = []
    for i in range(requests):
        a = i * 0.1
        rows.append(
            RequestRecord(
                f"r{i}", a, 100, 10, 0, a, a + 0.05 + 0.001 * i, a + 0.3 + 0.003 * i
            ).row()
        )
    req.append_rows(rows)
    req.close()
    srv = rd.table("server", SERVER_SCHEMA)
    srv.append_rows(
        [
            {
                "t_s": float(i),
                "scrape_ok": True,
                "scrape_latency_s": 0.01,
                "kv_cache_usage_frac": 0.1 * i if kv else None,
            }
            for i in range(10)
        ]
    )
    srv.close()
    rd.write_summary({"model": "m", "slo": {"ttft_s": 0.2}}, {"ttft_p99_s": 0.09})
    return path


def report_ok(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    out = tmp_path / "report.html"
    code, stdout, err = run(["report", str(run_dir), "--out", str(out)], capsys)
    assert code == 0, err
    assert "report written" in stdout
    return out.read_text()


def test_bench_without_kv_gauge_renders_without_that_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    html = report_ok(bench_run(tmp_path / "llama"), tmp_path, capsys)
    assert "the server exported no KV-cache gauge" in html
    assert "KV cache usage" not in report_specs(html)
    assert "TTFT distribution" in report_specs(html)  # the rest still renders
    # with the gauge exported the chart is there: the test can tell the two apart
    with_kv = build_report([bench_run(tmp_path / "vllm", kv=True)])
    assert "KV cache usage" in report_specs(with_kv)
    assert "exported no KV-cache gauge" not in with_kv


def test_equal_and_tiny_values_format_plainly() -> None:
    # every TPOT equal but for the last bits, and values far below 1: no exponent, no hang
    with time_limit(5):
        assert not wants_log([np.array([0.027777777777777776, 0.02777777777777778])])
        assert plain(3.157e-05) == "0.0000316"
        assert plain(2.041e05) == "204,100"
        assert plain(1e-15) == "0.000000000000001"
        assert wants_log([np.array([0.05, 40.0])]) and not wants_log([np.array([0.0, 40.0])])


def test_identical_requests_render(tmp_path: Path) -> None:
    rd = RunDir(tmp_path / "same", "simulate")
    req = rd.table("requests", REQUEST_SCHEMA)
    req.append_rows(
        [
            RequestRecord(
                f"r{i}", i * 0.1, 100, 10, 0, i * 0.1, i * 0.1 + 0.05, i * 0.1 + 0.3
            ).row()
            for i in range(20)
        ]
    )
    req.close()
    with time_limit(20):
        html = build_report([tmp_path / "same"])
    assert 'aria-label="TPOT distribution"' in html


def _write(p: Path, data: bytes | str) -> None:
    if isinstance(data, str):
        data = data.encode()
    p.write_bytes(data)


Damage = Callable[[Path], None]


def _empty_requests(d: Path) -> None:
    pq.write_table(REQUEST_SCHEMA.empty_table(), d / "requests.parquet")


def _only_summary(d: Path) -> None:
    for f in d.glob("*.parquet"):
        f.unlink()


def _summary_not_utf8(d: Path) -> None:
    _write(d / "summary.json", b"\xff\xfe{\x00")


def _summary_not_json(d: Path) -> None:
    _write(d / "summary.json", '{"kind": "bench", ')


def _summary_a_list(d: Path) -> None:
    _write(d / "summary.json", "[1, 2, 3]")


def _summary_deep(d: Path) -> None:
    _write(d / "summary.json", "[" * 100_000)


def _summary_odd_values(d: Path) -> None:
    _write(
        d / "summary.json",
        json.dumps({"kind": "bench", "config": "not a dict", "ttft_p99_s": "fast"}).replace(
            '"fast"', "NaN"
        )
        + "\n",
    )


def _summary_huge_number(d: Path) -> None:
    _write(d / "summary.json", '{"kind": "bench", "slo": {"ttft_s": 1e999}, "x": 1e999}')


def _garbage_parquet(d: Path) -> None:
    _write(d / "requests.parquet", b"PAR1 this is not parquet at all PAR1")


def _garbage_server(d: Path) -> None:
    _write(d / "server.parquet", np.random.default_rng(0).bytes(4096))


def _text_columns(d: Path) -> None:
    pq.write_table(
        pa.table({"t_s": ["a", "b"], "kv_cache_usage_frac": ["x", "y"]}), d / "server.parquet"
    )
    pq.write_table(pa.table({"ttft_s": ["slow"], "status": [None]}), d / "requests.parquet")


def _torn_stream(d: Path) -> None:
    (d / "server.parquet").unlink()
    _write(d / "server.arrows", b"\xff\xff\xff\xff garbage")


@pytest.mark.parametrize(
    "damage",
    [
        _empty_requests,
        _only_summary,
        _summary_not_utf8,
        _summary_not_json,
        _summary_a_list,
        _summary_deep,
        _summary_odd_values,
        _summary_huge_number,
        _garbage_parquet,
        _garbage_server,
        _text_columns,
        _torn_stream,
    ],
)
def test_damaged_run_renders_what_is_readable(
    damage: Damage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = bench_run(tmp_path / "run", kv=True)
    damage(d)
    html = report_ok(d, tmp_path, capsys)
    assert "<html>" in html or "<!doctype html>" in html


def test_damaged_summary_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = bench_run(tmp_path / "run", kv=True)
    _summary_a_list(d)
    assert "summary.json holds a JSON list" in report_ok(d, tmp_path, capsys)
    _garbage_parquet(d)
    assert "requests: unreadable" in report_ok(d, tmp_path, capsys)


def _memtrace_run(d: Path, heatmap: pa.Table) -> Path:
    d.mkdir()
    _write(d / "summary.json", json.dumps({"kind": "memtrace", "ooms": 1}))
    pq.write_table(heatmap, d / "heatmap.parquet")
    return d


@pytest.mark.parametrize(
    "cells",
    [
        {"row": [10**12], "col": [0], "allocated_frac": [1.0], "cell_bytes": [1.0]},
        {"row": [-5], "col": [-1], "allocated_frac": [1.0], "cell_bytes": [1.0]},
        {"row": [float("nan")], "col": [0.0], "allocated_frac": [1.0], "cell_bytes": [1.0]},
        {"row": [0, 1], "col": [0, 1], "allocated_frac": [None, None], "cell_bytes": [None, 1]},
    ],
)
def test_memtrace_heatmap_outside_a_grid_is_left_out(
    cells: dict[str, list[object]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = _memtrace_run(tmp_path / "mt", pa.table(cells))
    with time_limit(20):
        report_ok(d, tmp_path, capsys)


def test_comm_fit_of_the_wrong_types(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "comm"
    d.mkdir()
    _write(
        d / "summary.json",
        json.dumps({"kind": "comm", "fit": {"alpha_s": "fast", "beta_s_per_byte": None}}),
    )
    pq.write_table(
        pa.table({"size_bytes": [1024, 2048], "lat_p50_s": [1e-5, 2e-5]}), d / "comm.parquet"
    )
    html = report_ok(d, tmp_path, capsys)
    assert "fitted link alpha" not in html
    assert "Collective latency vs size" in report_specs(html)


def test_out_onto_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = bench_run(tmp_path / "run", kv=True)
    (tmp_path / "taken").mkdir()
    code, _, err = run(["report", str(d), "--out", str(tmp_path / "taken")], capsys)
    assert "is a directory" in one_error_line(code, err)


def test_out_under_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = bench_run(tmp_path / "run", kv=True)
    (tmp_path / "f").write_text("x")
    code, _, err = run(["report", str(d), "--out", str(tmp_path / "f" / "r.html")], capsys)
    assert "is a file" in one_error_line(code, err)


def test_out_in_a_missing_folder_is_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = bench_run(tmp_path / "run", kv=True)
    out = tmp_path / "new" / "deeper" / "r.html"
    code, _, err = run(["report", str(d), "--out", str(out)], capsys)
    assert code == 0, err
    assert out.stat().st_size > 1000


def test_run_dir_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "summary.json"
    f.write_text("{}")
    code, _, err = run(["report", str(f), "--out", str(tmp_path / "r.html")], capsys)
    assert "not a run directory" in one_error_line(code, err)


def test_markup_in_a_run_name_is_printed_as_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "[red]odd"  # rich would take [red] for a style and drop it
    d.mkdir()
    (d / "summary.json").write_text("[]")
    code, _, err = run(["report", str(d), "--out", str(tmp_path / "r.html")], capsys)
    assert code == 0, err
    assert "[red]odd: summary.json holds a JSON list" in err


def test_credentials_in_a_run_config_are_masked(tmp_path: Path) -> None:
    d = tmp_path / "old-bench"
    d.mkdir()
    _write(
        d / "summary.json",
        json.dumps(
            {
                "kind": "bench",
                "config": {
                    "url": "http://admin:hunter2hunter2@10.0.0.1:8000/v1",
                    "headers": {"Authorization": "Bearer abcdefghijklmnop"},
                    "api_key": "sk-abcdefghijklmnopqrstuvwx",
                },
            }
        ),
    )
    html = build_report([d])
    assert "10.0.0.1:8000" in html  # the configuration is shown ...
    for secret in ("hunter2hunter2", "abcdefghijklmnop", "sk-abcdefghij"):
        assert secret not in html  # ... without its credentials


def test_a_title_with_credentials_is_masked(tmp_path: Path) -> None:
    # Found by the CLI fuzzer: --title went into the page verbatim.
    from kvscope.report.page import render_report

    page = render_report([], title="from http://ops:Hunter2-secret@10.0.0.5:8000/v1 run")
    assert "Hunter2-secret" not in page and "http://10.0.0.5:8000/v1" in page
