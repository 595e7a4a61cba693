"""``kvscope watch``, ``kvscope dmon parse`` and ``kvscope telemetry export`` as a user runs
them: real subprocesses, real signals, real exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cli_helpers import run_kvscope

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "tests" / "telemetry" / "fixtures"
ENV = dict(os.environ, PYTHONPATH=str(REPO / "src"))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_kvscope(*args, env=ENV, timeout=60)


@pytest.fixture
def engine_url() -> Iterator[str]:
    body = (FIX / "sglang_metrics.txt").read_bytes()

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _has_driver() -> bool:
    return any(Path(p).exists() for p in ("/dev/nvidiactl", "/proc/driver/nvidia/version"))


@pytest.mark.integration
def test_watch_nvml_without_driver_prints_one_line_and_still_samples_engines(
    engine_url: str,
) -> None:
    if _has_driver():
        pytest.skip("this host has an NVIDIA driver")
    out = run(
        "watch",
        "--nvml",
        "--engine",
        engine_url,
        "--duration",
        "1",
        "--interval",
        "0.2",
        "--no-store",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 2, lines
    assert lines[0].startswith("kvscope watch: warning: NVML not available: ")
    assert lines[1].startswith("kvscope watch: warning: finished with faults: NVML not available")
    summary = json.loads(out.stdout)
    assert summary["gpus"] == 0 and summary["samples"] > 0
    assert any(k.endswith("/kv_cache_usage_ratio") for k in summary["waveforms"])


@pytest.mark.integration
@pytest.mark.slow
def test_sigterm_flushes_store_and_writes_run_dir(tmp_path: Path, engine_url: str) -> None:
    store, run_dir = tmp_path / "s.duckdb", tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvscope.cli.main",
            "watch",
            "--engine",
            engine_url,
            "--nvml-replay",
            str(FIX / "nvml_recording.json"),
            "--interval",
            "0.1",
            "--flush",
            "10",
            "--store",
            str(store),
            "--out",
            str(run_dir),
            "--json",
            "--log-batches",
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    assert "started" in proc.stderr.readline()  # signal handlers are in place from here
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["ticks"] > 3
    # --flush 10 means nothing was flushed before the signal: all of it came from the shutdown.
    assert summary["store_rows"] == summary["samples"] > 0
    assert (run_dir / "server.parquet").exists()
    assert json.loads((run_dir / "summary.json").read_text())["ticks"] == summary["ticks"]
    out = run(
        "telemetry",
        "export",
        "--store",
        str(store),
        "--format",
        "csv",
        "--out",
        str(tmp_path / "x.csv"),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["rows"] == summary["samples"]


def test_watch_bad_input_is_one_line_exit_2() -> None:
    out = run("watch", "--no-store")
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "nothing to watch" in out.stderr
    out = run("watch", "--engine", "x", "--interval", "0.01")
    assert out.returncode == 2 and "10 Hz" in out.stderr
    out = run("telemetry", "export", "--store", "/nonexistent.duckdb", "--out", "/tmp/x.parquet")
    assert out.returncode == 2 and "does not exist" in out.stderr
    out = run("telemetry", "export", "--since", "yesterday", "--out", "/tmp/x.parquet")
    assert out.returncode == 2 and "--since" in out.stderr


def test_dmon_parse_json() -> None:
    out = run("dmon", "parse", str(FIX / "dmon_pucm.txt"), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["format"] == "dmon" and data["rows"] == 6
    fb = [s["value"] for s in data["samples"] if s["metric"] == "gpu_memory_used_bytes"]
    assert fb[0] == 433 * 1024 * 1024
    bad = run("dmon", "parse", str(FIX / "nvml_recording.json"))
    assert bad.returncode == 2 and bad.stderr.startswith("kvscope: error:")


def test_telemetry_retain_downsamples_and_drops(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "src"))
    from kvscope.telemetry.series import Sample
    from kvscope.telemetry.store import Store

    now = time.time()
    with Store(tmp_path / "r.duckdb") as st:  # 3 h of 1 Hz samples ending now
        st.append([Sample(now - 10800 + i, "gpu:0", "m", float(i)) for i in range(10800)])
    out = run(
        "telemetry",
        "retain",
        "--store",
        str(tmp_path / "r.duckdb"),
        "--downsample-older-than",
        "1h",
        "--bucket",
        "60",
        "--drop-older-than",
        "2h",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    # The 2 h before the last hour became 120 one-minute means; the oldest hour of those went.
    assert res["rows_now"] == pytest.approx(3600 + 60, abs=2)
