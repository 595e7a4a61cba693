"""Actions: a real webhook POST to a loopback HTTP server, a real command, a log line."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kvscope.alerts.actions import dispatch, log_line
from kvscope.alerts.evaluate import replay
from kvscope.alerts.loader import load_pack_text
from kvscope.alerts.scenarios import scenario, series_set

pytestmark = pytest.mark.integration


class Hook:
    def __init__(self, status: int = 200) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers["Content-Length"])
                owner.bodies.append(json.loads(self.rfile.read(n)))
                owner.headers.append(self.headers["Content-Type"])
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def hook() -> Iterator[Hook]:
    h = Hook()
    yield h
    h.server.shutdown()
    h.server.server_close()


PACK = """
tiers:
  alert:
    response: 5m
    actions: [{{log: true}}, {{webhook: "{url}"}}, {{command: [{py}, -c, "{script}"]}}]
rules:
  - {{name: KvFull, signal: kv_cache_usage_ratio, kind: threshold, threshold: 0.98, for: 2m,
     tier: alert, why: KV nearly full, summary: KV above 98 %}}
"""
SCRIPT = (
    "import os, pathlib; pathlib.Path(os.environ['OUT']).write_text("
    "os.environ['KVSCOPE_ALERT_NAME'] + ' ' + os.environ['KVSCOPE_ALERT_LABELS'])"
)


def test_firing_and_resolving_run_every_action(
    hook: Hook, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUT", str(tmp_path / "fired.txt"))
    pack = load_pack_text(PACK.format(url=hook.url, py=sys.executable, script=SCRIPT))
    scn = scenario(pack.rules[0], pack, "fires")
    data = series_set(scn)
    # append a drop so the alert resolves
    data.add("kv_cache_usage_ratio", "engine:127.0.0.1:8000", "", scn.steps * 60.0, 0.1)
    events = replay(pack, data).events
    assert [e.state for e in events] == ["firing", "resolved"]
    lines: list[str] = []
    results = [r for e in events for r in dispatch(e, pack, write=lines.append)]
    assert [r.kind for r in results] == ["log", "webhook", "command", "log", "webhook"]
    assert all(r.ok for r in results), results
    assert [b["status"] for b in hook.bodies] == ["firing", "resolved"]
    first = hook.bodies[0]
    assert first["alertname"] == "KvFull" and first["tier"] == "alert"
    assert first["labels"] == {"engine": "127.0.0.1:8000"}
    assert first["threshold"] == 0.98 and first["value"] > 0.98
    assert first["response_time_s"] == 300 and first["starts_at"].endswith("Z")
    assert hook.headers == ["application/json"] * 2
    assert (tmp_path / "fired.txt").read_text() == "KvFull engine=127.0.0.1:8000"
    assert lines[0].startswith(f"1970-01-01T00:{events[0].t_s / 60:02.0f}:00Z FIRING KvFull")
    assert "respond_within=5m" in lines[0] and "\n" not in lines[0]


def test_failures_are_reported_not_raised(tmp_path: Path) -> None:
    bad = Hook(status=500)
    try:
        pack = load_pack_text(PACK.format(url=bad.url, py="/nonexistent/python", script="x"))
        scn = scenario(pack.rules[0], pack, "fires")
        ev = replay(pack, series_set(scn)).events[0]
        results = dispatch(ev, pack, write=lambda _: None)
    finally:
        bad.server.shutdown()
        bad.server.server_close()
    by_kind = {r.kind: r for r in results}
    assert not by_kind["webhook"].ok and by_kind["webhook"].detail == "HTTP 500"
    assert not by_kind["command"].ok
    closed = load_pack_text(PACK.format(url="http://127.0.0.1:9/none", py="/bin/true", script=""))
    r = dispatch(ev, closed, write=lambda _: None)[1]
    assert not r.ok and "cannot POST" in r.detail


def test_log_line_format() -> None:
    pack = load_pack_text(PACK.format(url="http://127.0.0.1:9/x", py="/bin/true", script=""))
    scn = scenario(pack.rules[0], pack, "fires")
    ev = replay(pack, series_set(scn)).events[0]
    assert log_line(ev, pack) == (
        "1970-01-01T00:05:00Z FIRING KvFull tier=alert {engine=127.0.0.1:8000} "
        "value=0.99 threshold=0.98 respond_within=5m"
    )
