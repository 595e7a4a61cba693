"""Live alerting in a real ``Watch`` loop: an unreachable engine pages a loopback webhook."""

from __future__ import annotations

import socket

import pytest

from kvscope.alerts.live import WatchAlerts
from kvscope.alerts.loader import load_pack_text
from kvscope.telemetry.engine import EngineScraper
from kvscope.telemetry.watch import Watch, WatchConfig

from .test_actions import Hook

pytestmark = pytest.mark.integration

PACK = """
interval: 1s
tiers:
  alert: {{response: 5m, actions: [{{webhook: "{url}"}}]}}
rules:
  - {{name: EngineDown, signal: engine_up, kind: threshold, op: "==", threshold: 0, for: 1s,
     tier: alert, why: scrape failing}}
"""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


def test_watch_fires_engine_down_to_webhook() -> None:
    hook = Hook()
    try:
        pack = load_pack_text(PACK.format(url=hook.url))
        url = f"http://127.0.0.1:{_closed_port()}"
        lines: list[str] = []
        alerts = WatchAlerts(pack, write=lines.append)
        cfg = WatchConfig(interval_s=0.25, duration_s=3.0, derive_every_s=60.0)
        w = Watch(cfg, engines=[EngineScraper(url, timeout_s=0.2)], on_tick=alerts)
        w.run()
    finally:
        hook.server.shutdown()
        hook.server.server_close()
    # evaluated once per second; pending at the first, firing one second later
    assert [e.state for e in alerts.events] == ["firing"]
    assert alerts.summary() == {"events": 1, "firing": ["EngineDown"], "actions_failed": 0}
    body = hook.bodies[0]
    assert body["alertname"] == "EngineDown" and body["status"] == "firing"
    assert body["labels"] == {"engine": url.removeprefix("http://")}
