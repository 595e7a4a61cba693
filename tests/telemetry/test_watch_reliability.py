"""Issue #20 for the watch loop: bad settings fail before sampling, URL credentials reach the
engine but never a row, a label or a file, and an engine that is not there is said at once."""

from __future__ import annotations

import base64
import math
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.telemetry.engine import EngineScraper, engine_url
from kvscope.telemetry.exporter import Exporter, LatestValues
from kvscope.telemetry.store import Store
from kvscope.telemetry.watch import Watch, WatchConfig

FIX = Path(__file__).parent / "fixtures"
PASSWORD = "s3cret-Planted-4417"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"duration_s": math.nan}, "--duration must be a finite number"),
        ({"duration_s": math.inf}, "--duration must be a finite number"),
        ({"duration_s": 0.0}, "--duration must be > 0"),
        ({"duration_s": 1e30}, "--duration must be <="),
        ({"interval_s": math.nan}, "--interval must be a finite number"),
        ({"interval_s": -1.0}, "--interval must be > 0"),
        ({"interval_s": 5.0, "duration_s": 1.0}, "longer than --duration"),
        ({"flush_s": math.nan}, "--flush"),
        ({"window_s": 0.0}, "--window"),
        ({"exporter_port": 99999}, "--exporter-port must be <= 65,535"),
        ({"exporter_port": -1}, "--exporter-port must be >= 0"),
        ({"listen": "http://u:p@h:1"}, "--listen"),
        ({"listen": ""}, "--listen"),
        ({"engines": ("not-a-url",)}, "not an engine URL"),
        ({"engines": ("ftp://127.0.0.1:9",)}, "not http or https"),
        ({"engines": ("http://",)}, "names no valid host"),
        ({"engines": ("http://127.0.0.1:99999",)}, "not an engine URL"),
    ],
)
def test_config_refuses_bad_settings(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(KvscopeError) as exc:
        WatchConfig(**kwargs)  # type: ignore[arg-type]
    assert words in exc.value.one_line()


def test_engine_url_keeps_the_shorthand_and_refuses_bare_words() -> None:
    assert engine_url("127.0.0.1:8000") == "http://127.0.0.1:8000/metrics"
    assert engine_url("http://h:1/") == "http://h:1/metrics"
    assert engine_url("https://h/custom") == "https://h/custom"
    for bad in ("not-a-url", "x", "", " ", "files/latin1.txt", "H100", "http://é∂漢:1"):
        with pytest.raises(KvscopeError):
            engine_url(bad)


def test_exporter_port_in_use_is_one_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(KvscopeError, match="in use"):
            Exporter.start(LatestValues(), port)
    with pytest.raises(KvscopeError, match="--exporter-port"):
        Exporter.start(LatestValues(), 99999)  # used to raise OverflowError from bind()


def test_exporter_failure_happens_before_sampling_and_writes_nothing(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        cfg = WatchConfig(
            interval_s=0.1,
            duration_s=5.0,
            engines=("http://127.0.0.1:9",),
            exporter_port=s.getsockname()[1],
            out_dir=tmp_path / "run",
        )
        w = Watch(cfg)
        start = time.monotonic()
        with pytest.raises(KvscopeError, match="cannot serve metrics"):
            w.run()
    assert time.monotonic() - start < 2.0 and w.state.ticks == 0
    assert not (tmp_path / "run").exists()  # no run directory of a session that never ran


@pytest.fixture
def auth_engine() -> Iterator[tuple[str, list[str]]]:
    """An engine page that demands HTTP Basic auth; yields its port and the headers seen."""
    body = (FIX / "sglang_metrics.txt").read_bytes()
    seen: list[str] = []
    want = "Basic " + base64.b64encode(f"user:{PASSWORD}".encode()).decode()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            got = self.headers.get("Authorization", "")
            seen.append(got)
            ok = got == want
            payload = body if ok else b"unauthorized\n"
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *a: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{srv.server_address[1]}", seen
    srv.shutdown()
    srv.server_close()


@pytest.mark.integration
def test_credentials_reach_the_engine_but_no_row_label_or_file(
    tmp_path: Path, auth_engine: tuple[str, list[str]]
) -> None:
    hostport, seen = auth_engine
    url = f"http://user:{PASSWORD}@{hostport}"
    cfg = WatchConfig(
        interval_s=0.1,
        duration_s=1.0,
        engines=(url,),
        store_path=tmp_path / "w.duckdb",
        exporter_port=0,
        out_dir=tmp_path / "run",
    )
    pages: list[bytes] = []

    def scrape_exporter(w: Watch) -> None:
        if w.exporter is not None and not pages:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{w.exporter.port}/metrics", timeout=5
            ) as r:
                pages.append(r.read())

    summary = Watch(cfg, on_tick=scrape_exporter).run()
    assert seen and all(h.startswith("Basic ") for h in seen)  # the scrape authenticated
    assert summary["engines_never_up"] == [] and summary["samples"] > 10
    assert pages and b"kvscope_engine_up" in pages[0]
    assert f'engine="{hostport}"'.encode() in pages[0]
    token = base64.b64encode(f"user:{PASSWORD}".encode())
    for blob in [pages[0], (tmp_path / "w.duckdb").read_bytes()] + [
        p.read_bytes() for p in (tmp_path / "run").iterdir()
    ]:
        assert PASSWORD.encode() not in blob and token not in blob
    with Store(tmp_path / "w.duckdb", read_only=True) as st:
        assert st.query("SELECT DISTINCT source FROM samples") == [(f"engine:{hostport}",)]


def test_unreachable_engine_is_told_within_two_seconds(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    told: list[tuple[float, str]] = []
    start = time.monotonic()
    cfg = WatchConfig(
        interval_s=0.2, duration_s=1.0, engines=(f"http://127.0.0.1:{port}",), out_dir=tmp_path
    )
    summary = Watch(cfg, on_warning=lambda m: told.append((time.monotonic() - start, m))).run()
    assert len(told) == 1 and told[0][0] < 2.0, told  # once per outage, not once per tick
    assert f"127.0.0.1:{port}" in told[0][1] and "not answering" in told[0][1]
    assert summary["engines_never_up"] == [f"http://127.0.0.1:{port}/metrics"]
    assert (tmp_path / "summary.json").exists() and (tmp_path / "server.parquet").exists()


def test_scraper_source_never_carries_userinfo() -> None:
    scr = EngineScraper(f"http://user:{PASSWORD}@10.0.0.1:8000", fetch=lambda _u, _t: "")
    assert scr.source == "engine:10.0.0.1:8000"
    assert PASSWORD not in scr.display_url


def test_existing_run_is_refused_before_sampling_unless_forced(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text('{"kind": "bench"}')
    cfg = WatchConfig(interval_s=0.1, duration_s=0.3, engines=("127.0.0.1:9",), out_dir=run)
    with pytest.raises(KvscopeError, match="already exists"):
        Watch(cfg).run()
    assert (run / "summary.json").read_text() == '{"kind": "bench"}'
    forced = WatchConfig(
        interval_s=0.1, duration_s=0.3, engines=("127.0.0.1:9",), out_dir=run, force=True
    )
    Watch(forced).run()
    assert '"kind": "watch"' in (run / "summary.json").read_text()
