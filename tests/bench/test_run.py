"""End to end against ``kvscope mock-server`` (a real HTTP server on 127.0.0.1)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from bench_helpers import cli_env, kvscope, max_overlap

from kvscope.results import read_table

pytestmark = pytest.mark.integration


def _bench(url: str, out: Path, *flags: str, timeout: float = 120) -> dict[str, object]:
    r = kvscope("bench", "--url", url, "--model", "mock", "--out", str(out), "--json", *flags,
                timeout=timeout)  # fmt: skip
    assert "Traceback" not in r.stderr, r.stderr
    summary = json.loads(r.stdout)
    summary["_rc"] = r.returncode
    summary["_stderr"] = r.stderr
    return summary


def test_scripted_timings_usage_and_metrics(
    mock_server: Callable[..., str], tmp_path: Path
) -> None:
    url = mock_server("--ttft", "0.05", "--itl", "0.005")
    s = _bench(
        url, tmp_path / "run", "--arrival", "poisson:rate=20", "--num-requests", "40",
        "--prompt-len", "64", "--output-len", "8", "--scrape-interval", "0.1",
    )  # fmt: skip
    assert s["_rc"] == 0, s["_stderr"]
    assert s["kind"] == "bench" and s["completed"] == 40 and s["errors"] == 0
    # TTFT: the scripted 50 ms plus loopback and scheduling, never less
    assert 0.05 <= s["ttft_p50_s"] < 0.09  # type: ignore[operator]
    # ITL and TPOT: the scripted 5 ms between tokens (asyncio timers round up to ~1 ms)
    assert 0.004 <= s["itl_p50_s"] < 0.012  # type: ignore[operator]
    assert 0.004 <= s["tpot_p50_s"] < 0.012  # type: ignore[operator]
    assert s["itl_gaps"] == 40 * 7
    # usage: output from the server's usage chunk; prompts sized from its own counts
    t = pq.read_table(tmp_path / "run" / "requests.parquet")
    assert t.column("output_tokens").to_pylist() == [8] * 40
    assert s["prompt_tokens_error"]["exact_share"] == 1.0  # type: ignore[index]
    # the /metrics waveform was sampled while requests ran
    srv = pq.read_table(tmp_path / "run" / "server.parquet")
    assert srv.schema.names[0] == "t_s" and srv.num_rows >= 10
    running = np.asarray(srv.column("requests_running").to_pylist())
    assert running.max() >= 1
    gen = np.asarray(srv.column("generation_tokens_total").to_pylist())
    assert gen[-1] - gen[0] >= 8 * 30 and np.all(np.diff(gen) >= 0)
    assert s["server_metrics"]["requests_running_peak"] >= 1  # type: ignore[index]
    # every chunk's time is kept
    chunks = pq.read_table(tmp_path / "run" / "chunks.parquet")
    assert [len(c) for c in chunks.column("chunk_times_s").to_pylist()] == [8] * 40


def test_chat_endpoint(mock_server: Callable[..., str], tmp_path: Path) -> None:
    url = mock_server("--ttft", "0.01")
    s = _bench(
        url, tmp_path / "chat", "--endpoint", "chat", "--arrival", "poisson:rate=30",
        "--num-requests", "20", "--output-len", "4", "--prompt-len", "32",
    )  # fmt: skip
    assert s["_rc"] == 0 and s["completed"] == 20
    assert s["config"]["server"]["endpoint"] == "chat"  # type: ignore[index]


def test_failures_are_classified_and_fail_the_run(
    mock_server: Callable[..., str], tmp_path: Path
) -> None:
    url = mock_server("--fail-rate", "0.3", "--seed", "1")
    # the preflight needs two good answers: with a 30 % failure rate retry until it passes
    s = _bench(
        url, tmp_path / "f", "--arrival", "poisson:rate=50", "--num-requests", "100",
        "--output-len", "2", "--prompt-len", "16", "--max-error-rate", "0.1",
    )  # fmt: skip
    t = read_table(tmp_path / "f", "requests")
    assert t is not None and t.num_rows == 100
    kinds = t.column("error_kind").to_pylist()
    n_err = kinds.count("http_status")
    assert 15 <= n_err <= 45
    assert s["errors_by_kind"] == {"http_status": n_err}
    assert s["errors_by_http_status"] == {"500": n_err}
    assert s["completed"] == 100 - n_err
    assert s["_rc"] == 1 and "above --max-error-rate" in str(s["_stderr"])


def test_closed_loop_keeps_exactly_n_in_flight(
    mock_server: Callable[..., str], tmp_path: Path
) -> None:
    url = mock_server("--ttft", "0.02", "--itl", "0.002")
    s = _bench(
        url, tmp_path / "c", "--arrival", "concurrency:n=4", "--num-requests", "40",
        "--output-len", "5", "--prompt-len", "16",
    )  # fmt: skip
    assert s["_rc"] == 0 and s["completed"] == 40
    t = pq.read_table(tmp_path / "c" / "requests.parquet")
    assert max_overlap(t.column("sent_s").to_pylist(), t.column("finish_s").to_pylist()) == 4


def test_cap_over_a_rate_never_bursts(mock_server: Callable[..., str], tmp_path: Path) -> None:
    url = mock_server("--ttft", "0.03")
    s = _bench(
        url, tmp_path / "cap", "--arrival", "poisson:rate=200", "--num-requests", "60",
        "--output-len", "2", "--prompt-len", "16", "--max-concurrency", "2",
    )  # fmt: skip
    t = pq.read_table(tmp_path / "cap" / "requests.parquet").sort_by("arrival_s")
    sent, fin = t.column("sent_s").to_pylist(), t.column("finish_s").to_pylist()
    assert max_overlap(sent, fin) <= 2
    sent = np.asarray(sent)
    sched = np.asarray(t.column("arrival_s").to_pylist())
    slide = np.asarray(t.column("cap_delay_s").to_pylist())
    # the schedule slides but never compresses: the slide only grows, so every target keeps
    # its scheduled gap (a semaphore in front of each request releases waiting ones together)
    assert np.all(np.diff(slide) >= -1e-9)
    bursts = (np.diff(sent) < 0.0005) & (np.diff(sched) > 0.002)
    assert bursts.sum() <= 3  # only pacing lag on a loaded machine can bunch two sends
    assert s["cap_delay_max_s"] > 0.1  # type: ignore[operator]
    assert s["client_limited"] is False
    assert any("--max-concurrency cap" in w for w in s["warnings"])  # type: ignore[attr-defined]


def test_warmup_is_left_out(mock_server: Callable[..., str], tmp_path: Path) -> None:
    url = mock_server()
    s = _bench(
        url, tmp_path / "w", "--arrival", "poisson:rate=40", "--duration", "2",
        "--output-len", "2", "--prompt-len", "16", "--warmup", "1", "--cooldown", "0.5",
    )  # fmt: skip
    t = pq.read_table(tmp_path / "w" / "requests.parquet")
    phases = t.column("phase").to_pylist()
    arr = np.asarray(t.column("arrival_s").to_pylist())
    assert phases.count("warmup") == int((arr < 1.0).sum()) == s["requests_warmup"]
    assert s["requests"] == phases.count("measure") > 0


@pytest.mark.slow
def test_ctrl_c_keeps_everything_measured(mock_server: Callable[..., str], tmp_path: Path) -> None:
    url = mock_server("--ttft", "0.05", "--itl", "0.05")
    out = tmp_path / "int"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvscope.cli.main", "bench", "--url", url, "--model", "mock",
         "--arrival", "poisson:rate=20", "--num-requests", "400", "--output-len", "10",
         "--prompt-len", "16", "--out", str(out), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not (out / "requests.arrows").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    s = json.loads(stdout)
    assert s["interrupted"] is True
    t = pq.read_table(out / "requests.parquet")
    status = t.column("status").to_pylist()
    # everything released is recorded: finished ones ok, the ones in flight as cancelled
    assert 10 <= t.num_rows < 400
    assert status.count("ok") >= 3
    cancelled = t.column("error_kind").to_pylist().count("cancelled")
    assert cancelled >= 1 and status.count("incomplete") == cancelled
    assert s["requests_total"] == t.num_rows
