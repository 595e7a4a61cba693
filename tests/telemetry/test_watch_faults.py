"""No silent failures in the watch loop (issue #21): every way an engine URL can be wrong is
told at once, by its cause, once per cause, and the store's failure mid-run is told at once
with every sample still reaching the run directory. Real loopback servers throughout."""

from __future__ import annotations

import contextlib
import resource
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fault_servers import FaultyHttp, SilentServer, refused_port
from kvscope.telemetry.engine import FIRST_CONTACT_TIMEOUT_S, EngineScraper, fault_cause
from kvscope.telemetry.gpu import GpuSampler
from kvscope.telemetry.nvml_replay import open_replay
from kvscope.telemetry.series import Sample
from kvscope.telemetry.store import Store
from kvscope.telemetry.watch import Watch, WatchConfig

RECORDING = Path(__file__).parent / "fixtures" / "nvml_recording.json"


@pytest.fixture
def http() -> Iterator[FaultyHttp]:
    srv = FaultyHttp("404")
    yield srv
    srv.close()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    srv = SilentServer()
    yield srv
    srv.close()


@pytest.mark.parametrize(
    ("mode", "cause"),
    [
        ("404", "HTTP 404"),
        ("500", "HTTP 500"),
        ("html", "not a metrics page"),
        ("other", "not a metrics page"),
    ],
)
def test_each_http_fault_has_its_cause(http: FaultyHttp, mode: str, cause: str) -> None:
    http.mode = mode
    scr = EngineScraper(http.url)
    out = scr.sample()
    assert [(s.metric, s.value) for s in out] == [("engine_up", 0.0)]
    assert scr.up is False and scr.ok_scrapes == 0 and scr.last_cause == cause
    assert "HTTP" in scr.last_error if mode.isdigit() else "no engine series" in scr.last_error
    http.mode = "ok"
    assert any(s.metric == "kv_cache_usage_ratio" for s in scr.sample())
    assert scr.up is True and scr.last_cause == ""


def test_refused_port_is_connection_refused() -> None:
    scr = EngineScraper(f"http://127.0.0.1:{refused_port()}")
    scr.sample()
    assert scr.last_cause == "connection refused", scr.last_error


def test_first_contact_times_out_fast_then_waits_the_full_timeout(silent: SilentServer) -> None:
    scr = EngineScraper(f"http://127.0.0.1:{silent.port}", timeout_s=1.5)
    t0 = time.monotonic()
    scr.sample()
    first = time.monotonic() - t0
    assert scr.last_cause == "timed out", scr.last_error
    assert FIRST_CONTACT_TIMEOUT_S - 0.05 <= first < FIRST_CONTACT_TIMEOUT_S + 0.5, first
    t0 = time.monotonic()
    scr.sample()
    assert time.monotonic() - t0 >= 1.4  # a slow engine gets its full timeout afterwards


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        ("cannot scrape h:1/metrics: [Errno 111] Connection refused", "connection refused"),
        ("cannot scrape h:1/metrics: timed out", "timed out"),
        ("cannot scrape h:1/metrics: HTTP 503", "HTTP 503"),
        ("cannot scrape h:1/metrics: bad status line b'SSH-2.0'", "not an HTTP metrics server"),
        ("cannot scrape h:1/metrics: [Errno -2] Name or service not known", "host not found"),
        ("cannot scrape h:1/metrics: something new", "something new"),
    ],
)
def test_fault_cause_names(message: str, cause: str) -> None:
    assert fault_cause(message) == cause


def test_watch_tells_each_cause_once_and_the_recovery(tmp_path: Path, http: FaultyHttp) -> None:
    told: list[tuple[float, str]] = []
    start = time.monotonic()

    def script(w: Watch) -> None:  # 404 for 5 ticks, then 500 for 5, then a real page
        http.mode = "404" if w.state.ticks < 5 else "500" if w.state.ticks < 10 else "ok"

    cfg = WatchConfig(interval_s=0.1, duration_s=2.0, engines=(http.url,), out_dir=tmp_path)
    w = Watch(cfg, on_tick=script, on_warning=lambda m: told.append((time.monotonic() - start, m)))
    summary = w.run()
    lines = [m for _, m in told]
    assert len(lines) == 3, lines  # not one per failed tick
    assert "not answering (HTTP 404)" in lines[0] and told[0][0] < 1.0
    assert "still not answering (HTTP 500)" in lines[1]
    assert lines[2] == f"engine {http.url}/metrics answers again."
    assert summary["engines_never_up"] == [] and summary["engine_faults"]


def test_silent_engine_is_told_within_a_second_of_sampling(silent: SilentServer) -> None:
    told: list[float] = []
    started: list[float] = []
    cfg = WatchConfig(interval_s=0.2, duration_s=1.5, engines=(f"127.0.0.1:{silent.port}",))
    Watch(
        cfg,
        on_start=lambda _w: started.append(time.monotonic()),
        on_warning=lambda _m: told.append(time.monotonic()),
    ).run()
    assert len(told) == 1 and told[0] - started[0] < 1.0, (told, started)


@contextlib.contextmanager
def file_size_limit(n_bytes: int) -> Iterator[Callable[[], None]]:
    """Writes past ``n_bytes`` of any file fail with EFBIG, as on a full disk (this process);
    yields the function that lifts the limit again."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed

    def lift() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, hard))
    try:
        yield lift
    finally:
        lift()
        signal.signal(signal.SIGXFSZ, old)


def test_store_that_fails_mid_run_is_told_at_once_and_loses_no_sample(tmp_path: Path) -> None:
    told: list[tuple[int, str]] = []
    path = tmp_path / "s.duckdb"
    Store(path).close()  # made before the limit: the failure comes from the batches
    cfg = WatchConfig(
        interval_s=0.1, duration_s=2.0, store_path=path, flush_s=0.2, out_dir=tmp_path / "run"
    )
    gpus = GpuSampler(open_replay(RECORDING))
    w = Watch(cfg, gpus=gpus, on_warning=lambda m: told.append((w.state.ticks, m)))
    with file_size_limit(10_000) as lift:
        # The store's write-ahead log passes 10 kB after a few batches; the limit is lifted
        # before the run directory (24 kB of Parquet) is written at the end.
        w.on_tick = lambda ww: lift() if ww.state.ticks == 17 else None
        summary = w.run()
    store_lines = [(k, m) for k, m in told if "store write failed" in m]
    assert len(store_lines) == 1, told  # told once, not once per batch
    assert store_lines[0][0] < summary["ticks"] - 3, told  # at once, not at the end
    assert "File too large" in store_lines[0][1] and "sampling goes on" in store_lines[0][1]
    assert summary["store_error"] and str(path) in summary["store_error"]
    assert 0 < summary["store_rows"] < summary["samples"]
    table = pq.read_table(tmp_path / "run" / "server.parquet")
    assert table.num_rows == summary["ticks"]  # committed and unwritten: every tick is there


def test_store_append_reports_the_real_cause_not_the_rollback(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as st:
        st._con.execute("ALTER TABLE samples RENAME TO gone")  # the insert must fail
        with pytest.raises(Exception) as info:
            st.append([Sample(1.0, "a", "b", 1.0)])
        assert "rollback" not in str(info.value).lower()
        assert "samples" in str(info.value)
