"""``kvscope watch`` under bad input (issue #20, and #21's silent unreachable engine): one
line and exit 2 before any sampling, the output path checked at the start, no credential in
anything written or served, and exit 1 when the engine asked for never answered."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import duckdb
import pytest

from cli_helpers import one_error_line, run_in_process

REPO = Path(__file__).resolve().parents[2]
RECORDING = REPO / "tests" / "telemetry" / "fixtures" / "nvml_recording.json"
ENV = dict(os.environ, PYTHONPATH=str(REPO / "src"))
PASSWORD = "PASS-watch-planted-9021"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


REPLAY = ["watch", "--nvml-replay", str(RECORDING), "--interval", "0.2"]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--exporter-port", "99999"], "--exporter-port must be <= 65,535"),
        (["--exporter-port", "-1"], "--exporter-port must be >= 0"),
        (["--duration", "1", "--listen", "not an address"], "--listen"),
        (["--duration", "0.1", "--interval", "0.2"], "longer than --duration"),
        (["--duration", "1e30"], "--duration must be <="),
    ],
)
def test_bad_settings_are_one_line_before_sampling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    start = time.monotonic()
    code, _, err = run_in_process([*REPLAY, "--no-store", *extra], capsys)
    one_error_line(code, err, words)
    assert time.monotonic() - start < 5.0


def test_exporter_port_in_use_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = str(s.getsockname()[1])
        code, _, err = run_in_process(
            [*REPLAY, "--no-store", "--duration", "5", "--exporter-port", port], capsys
        )
    one_error_line(code, err, "cannot serve metrics", "in use")


def test_engine_that_is_not_a_url_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_in_process(
        ["watch", "--engine", "not-a-url", "--duration", "1", "--no-store"], capsys
    )
    one_error_line(code, err, "'not-a-url' is not an engine URL")


def test_out_that_is_a_file_fails_at_the_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "precious.txt"
    out.write_text("a result someone measured\n")
    start = time.monotonic()
    code, _, err = run_in_process(
        [*REPLAY, "--no-store", "--duration", "30", "--out", str(out)], capsys
    )
    assert time.monotonic() - start < 5.0  # not after the 30 s watch, with its samples lost
    one_error_line(code, err, "is a file")
    assert out.read_text() == "a result someone measured\n"


def test_earlier_run_needs_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text('{"kind": "bench", "completed": 97}')
    argv = [*REPLAY, "--no-store", "--duration", "0.6", "--out", str(out), "--json"]
    code, _, err = run_in_process(argv, capsys)
    one_error_line(code, err, "already exists", "--force")
    assert json.loads((out / "summary.json").read_text())["completed"] == 97
    code, _, err = run_in_process([*argv, "--force"], capsys)
    assert code == 0, err
    assert json.loads((out / "summary.json").read_text())["kind"] == "watch"


@pytest.mark.parametrize("kind", ["other-tables", "text", "empty-file"])
def test_foreign_store_is_refused_and_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    store = tmp_path / "their.duckdb"
    if kind == "other-tables":
        con = duckdb.connect(str(store))
        con.execute("CREATE TABLE payroll (name VARCHAR, salary DOUBLE)")
        con.close()
    else:
        store.write_text("" if kind == "empty-file" else "not a database\n")
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    code, _, err = run_in_process([*REPLAY, "--duration", "1", "--store", str(store)], capsys)
    one_error_line(code, err, f"{store}: not a kvscope store (")
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before
    assert os.listdir(tmp_path) == [store.name]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b'{"devices": "\xff"}', "not UTF-8"),
        (b'{"devices": [1, 2]}', "devices[0] is not an object"),
        (b'{"devices": [{"nvmlDeviceGetMemoryInfo": "lots"}]}', "wrong shape"),
        (b'{"devices": [{}], "xid_events": [[5, 79]]}', "xid_events"),
        (b'{"devices": [], "x": NaN}', "NaN"),
        (b"", "not valid JSON"),
    ],
)
def test_bad_nvml_replay_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, words: str
) -> None:
    rec = tmp_path / "rec.json"
    rec.write_bytes(content)
    code, _, err = run_in_process(
        ["watch", "--nvml-replay", str(rec), "--duration", "1", "--no-store"], capsys
    )
    one_error_line(code, err, words)


def test_rules_with_nan_threshold_stop_the_watch_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(
        "rules:\n  - {name: Bad, signal: kv_cache_usage_ratio, kind: threshold, op: '>',\n"
        "     threshold: .nan, for: 1m, tier: warning, why: w}\n"
    )
    code, _, err = run_in_process(
        [*REPLAY, "--no-store", "--duration", "1", "--rules", str(rules)], capsys
    )
    one_error_line(code, err, "rule 'Bad'", "field 'threshold'", "finite")


@pytest.mark.integration
def test_unreachable_engine_warns_at_once_and_exits_1(tmp_path: Path) -> None:
    port = _free_port()
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvscope.cli.main",
            "watch",
            "--engine",
            f"http://user:{PASSWORD}@127.0.0.1:{port}",
            "--interval",
            "0.25",
            "--duration",
            "4",
            "--store",
            str(tmp_path / "s.duckdb"),
            "--out",
            str(out),
            "--exporter-port",
            "0",
            "--json",
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    exporter = proc.stderr.readline()  # "kvscope watch: exporter on http://127.0.0.1:P/metrics"
    started = time.monotonic()
    warning = proc.stderr.readline()
    assert time.monotonic() - started < 2.0, warning  # said within 2 s, not at the end
    assert "warning" in warning and f"127.0.0.1:{port}" in warning and "not answering" in warning
    url = exporter.strip().rsplit(" ", 1)[-1]
    with urllib.request.urlopen(url, timeout=5) as r:
        page = r.read()
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 1, stderr  # it ran, but got nothing of the engine asked for
    assert "no sample from" in stderr and "Traceback" not in stderr
    summary = json.loads(stdout)
    assert summary["samples"] > 0 and summary["engines_never_up"]
    assert (out / "summary.json").exists() and (out / "server.parquet").exists()
    assert f'engine="127.0.0.1:{port}"'.encode() in page
    texts = [page, stdout.encode(), stderr.encode(), exporter.encode(), warning.encode()]
    texts += [p.read_bytes() for p in [tmp_path / "s.duckdb", *out.iterdir()]]
    for blob in texts:
        assert PASSWORD.encode() not in blob
