"""``kvscope watch`` never fails silently (issue #21): a dead engine URL, NVML absent, a store
that cannot be written. Each is told on stderr at once (timed here from the process start),
and the exit code says whether the run got what it was asked for: 1 when it got nothing (or
the store broke), 0 with a closing warning line when some sources answered. Real processes,
real loopback servers, the real absence of NVML on a GPU-less host."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cli_helpers import one_error_line, run_in_process
from fault_servers import FaultyHttp, SilentServer, refused_port

REPO = Path(__file__).resolve().parents[2]
RECORDING = REPO / "tests" / "telemetry" / "fixtures" / "nvml_recording.json"
ENV = dict(os.environ, PYTHONPATH=str(REPO / "src"))
#: The promise: the first warning within 2 s of starting the command. Start-up (imports) is
#: ~0.4 s on an idle core and over 1.5 s on this project's shared, loaded 2-core CI box; the
#: part the watch controls, sampling start to warning, is checked to be under 1 s.
WARN_AFTER_SAMPLING_S = 1.0


def _kvscope(*args: str, **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "kvscope.cli.main", *args],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,  # type: ignore[call-overload]
    )


@pytest.fixture
def mock_engine() -> Iterator[str]:
    proc = _kvscope("mock-server", "--port", "0")
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "mock server listening on http://127.0.0.1:P"
    assert "listening on" in line, line
    yield line.strip().rsplit(" ", 1)[-1]
    proc.terminate()
    proc.communicate(timeout=10)


@pytest.fixture
def dead_url(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(URL, expected cause) for each way an engine URL can be dead."""
    kind = request.param
    if kind == "refused":
        yield f"http://127.0.0.1:{refused_port()}", "Connection refused"
    elif kind == "silent":
        srv = SilentServer()
        yield f"http://127.0.0.1:{srv.port}", "timed out"
        srv.close()
    else:
        http = FaultyHttp(kind)
        yield http.url, {"404": "HTTP 404", "500": "HTTP 500"}.get(kind, "not a metrics page")
        http.close()


def _timed_watch(*args: str) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run a watch (with --log-batches); return it, and the seconds from the process start
    and from the start of sampling to its first warning line."""
    t0 = time.monotonic()
    proc = _kvscope("watch", "--log-batches", *args)
    assert proc.stderr is not None
    started = proc.stderr.readline()
    t_started = time.monotonic()
    assert "started" in started, started
    warning = proc.stderr.readline()
    t_warned = time.monotonic()
    out, rest = proc.communicate(timeout=60)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, started + warning + rest)
    return done, t_warned - t0, t_warned - t_started


@pytest.mark.integration
@pytest.mark.parametrize("dead_url", ["refused", "silent", "404", "500", "html"], indirect=True)
def test_dead_engine_is_told_at_once_once_and_exits_1(
    tmp_path: Path, dead_url: tuple[str, str]
) -> None:
    url, cause = dead_url
    done, from_start, from_sampling = _timed_watch(
        "--engine", url, "--interval", "0.2", "--duration", "3", "--out", str(tmp_path / "run")
    )
    print(f"time to first warning: {from_start:.2f} s from start, {from_sampling:.2f} s sampling")
    lines = [ln for ln in done.stderr.splitlines() if ln.strip() and "batch" not in ln]
    warnings = [ln for ln in lines if ln.startswith("kvscope watch: warning:")]
    assert from_sampling < WARN_AFTER_SAMPLING_S, done.stderr
    assert from_start < 3.0, from_start  # 2 s unless start-up alone takes over 1.5 s
    assert len(warnings) == 1, done.stderr  # one line per cause, not one per scrape
    assert url.removeprefix("http://") in warnings[0] and cause in warnings[0], warnings[0]
    assert done.returncode == 1, done.stderr  # not 0 (nothing watched), not 2 (bad input)
    assert lines[-1].startswith("kvscope watch: error: no sample from "), lines
    assert "Traceback" not in done.stderr
    assert (tmp_path / "run" / "summary.json").exists()  # what there was is kept


@pytest.mark.integration
def test_healthy_engine_is_silent_and_exits_0(mock_engine: str) -> None:
    done, _, _ = _timed_watch("--engine", mock_engine, "--interval", "0.2", "--duration", "1.5")
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr and "error" not in done.stderr, done.stderr


@pytest.mark.integration
def test_one_dead_engine_of_two_is_a_warning_summary_and_exit_0(mock_engine: str) -> None:
    dead = f"http://127.0.0.1:{refused_port()}"
    done, _, from_sampling = _timed_watch(
        "--engine", mock_engine, "--engine", dead, "--interval", "0.2", "--duration", "2"
    )
    assert from_sampling < WARN_AFTER_SAMPLING_S
    assert done.returncode == 0, done.stderr  # one source it was asked for answered
    last = [ln for ln in done.stderr.splitlines() if ln.strip()][-1]
    assert last.startswith("kvscope watch: warning: finished with faults: no sample from "), last
    assert dead.removeprefix("http://") in last and "Connection refused" in last


@pytest.mark.integration
def test_engine_that_comes_back_is_told(tmp_path: Path) -> None:
    http = FaultyHttp("404")
    try:
        proc = _kvscope(
            "watch", "--engine", http.url, "--interval", "0.1", "--duration", "3", "--no-store"
        )
        assert proc.stderr is not None
        first = proc.stderr.readline()
        http.mode = "ok"
        _, rest = proc.communicate(timeout=60)
    finally:
        http.close()
    assert "not answering (HTTP 404)" in first, first
    assert "answers again" in rest and proc.returncode == 0, rest
    assert "finished with faults" in rest and "failed" in rest  # the outage, summed up


def _has_driver() -> bool:
    return any(Path(p).exists() for p in ("/dev/nvidiactl", "/proc/driver/nvidia/version"))


@pytest.mark.integration
def test_nvml_alone_without_nvml_fails_at_once_with_exit_1() -> None:
    if _has_driver():
        pytest.skip("this host has an NVIDIA driver")
    t0 = time.monotonic()
    proc = _kvscope("watch", "--nvml", "--duration", "30", "--no-store")
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 10  # at once, not after the 30 s
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 1, err
    assert len(lines) == 1 and lines[0].startswith("kvscope: error: NVML not available: "), err
    assert "nothing else to watch" in lines[0]


@pytest.mark.integration
def test_nvml_absent_beside_an_engine_warns_first_and_exits_0(mock_engine: str) -> None:
    if _has_driver():
        pytest.skip("this host has an NVIDIA driver")
    proc = _kvscope(
        "watch", "--nvml", "--engine", mock_engine, "--duration", "1", "--interval", "0.2",
        "--no-store", "--json",
    )  # fmt: skip
    out, err = proc.communicate(timeout=60)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 0, err
    assert lines[0].startswith("kvscope watch: warning: NVML not available: "), err
    assert "GPU metrics will be missing" in lines[0]
    assert lines[-1].startswith("kvscope watch: warning: finished with faults: NVML not")
    assert json.loads(out)["samples"] > 0


@pytest.mark.parametrize(
    ("recording", "why"),
    [
        ({"devices": []}, "NVML sees no GPU"),  # the library answers, the host has no GPU
        ({"devices": [], "init_error": "LibraryNotFound"}, "no NVIDIA driver"),
    ],
)
def test_recorded_gpu_less_host_is_the_same_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], recording: dict[str, object], why: str
) -> None:
    rec = tmp_path / "rec.json"
    rec.write_text(json.dumps(recording))
    code, _, err = run_in_process(
        ["watch", "--nvml-replay", str(rec), "--duration", "5", "--no-store"], capsys
    )
    assert code == 1 and err.count("\n") == 1, err
    assert err.startswith("kvscope: error: NVML not available: ") and why in err, err


@pytest.mark.parametrize(
    ("store", "words"),
    [
        ("{file}/s.duckdb", "a parent is a file"),
        ("/proc/kvscope-test/s.duckdb", "/proc/kvscope-test/s.duckdb"),
    ],
)
def test_unwritable_store_is_one_line_before_sampling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], store: str, words: str
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    path = store.format(file=afile)
    t0 = time.monotonic()
    code, _, err = run_in_process(
        ["watch", "--nvml-replay", str(RECORDING), "--duration", "20", "--store", path], capsys
    )
    assert time.monotonic() - t0 < 5  # before sampling, not after the 20 s
    one_error_line(code, err, words.format(file=afile))


def _limit_file_size() -> None:
    # In the child: any write past 64 kB of a file fails with EFBIG, as on a full disk.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))


@pytest.mark.integration
def test_store_write_failure_mid_run_warns_at_once_keeps_the_run_and_exits_1(
    tmp_path: Path,
) -> None:
    store, run = tmp_path / "s.duckdb", tmp_path / "run"
    t0 = time.monotonic()
    proc = _kvscope(
        "watch", "--nvml-replay", str(RECORDING), "--interval", "0.1", "--duration", "7",
        "--flush", "0.2", "--store", str(store), "--out", str(run), "--json",
        preexec_fn=_limit_file_size,
    )  # fmt: skip
    assert proc.stderr is not None
    warning = proc.stderr.readline()
    warned = time.monotonic() - t0
    out, rest = proc.communicate(timeout=60)
    total = time.monotonic() - t0
    assert "warning:" in warning and "store write failed" in warning, warning + rest
    assert "File too large" in warning and str(store) in warning
    assert warned < total - 1.0, (warned, total)  # said when it happened, not at the end
    assert proc.returncode == 1, rest
    last = [ln for ln in rest.splitlines() if ln.strip()][-1]
    assert last.startswith("kvscope watch: error: ") and f"every sample is in {run}" in last
    summary = json.loads(out)
    assert 0 < summary["store_rows"] < summary["samples"]
    assert pq.read_table(run / "server.parquet").num_rows == summary["ticks"]
