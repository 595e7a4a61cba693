"""Drive Debian's headless Chromium over the DevTools protocol (loopback only)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "--remote-debugging-address=127.0.0.1",
    "--window-size=1400,1000",
]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One browser page: navigate, evaluate, collect console errors, screenshot."""

    def __init__(self, binary: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="kvscope-chromium-")
        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stderr=subprocess.PIPE,
            text=True,
        )
        port = self._port()
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list"))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30)
        self._id = 0
        self.errors: list[str] = []
        for method in ("Runtime.enable", "Log.enable", "Page.enable"):
            self.call(method)

    def _port(self) -> int:
        assert self.proc.stderr is not None
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            m = re.search(r"ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                return int(m.group(1))
        raise RuntimeError("chromium did not open its DevTools port")

    def _collect(self, msg: dict[str, Any]) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.errors.append(params["exceptionDetails"].get("text", "exception"))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(str(params.get("args")))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            url = str(params.get("request", {}).get("url", ""))
            if not url.startswith(("file:", "data:", "about:")):
                getattr(self, "requested", self.errors).append(f"network request: {url}")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
            self._collect(msg)

    def open(self, path: Path) -> None:
        self.call("Page.navigate", url=path.resolve().as_uri())
        deadline = time.time() + 30
        while time.time() < deadline:
            msg = json.loads(self.ws.recv())
            self._collect(msg)
            if msg.get("method") == "Page.loadEventFired":
                return
        raise RuntimeError("page did not load")

    def offline(self) -> list[str]:
        """Cut the page off the network; returns the list the URLs it asked for go into."""
        self.call("Network.enable")
        self.call(
            "Network.emulateNetworkConditions",
            offline=True,
            latency=0,
            downloadThroughput=-1,
            uploadThroughput=-1,
        )
        self.requested: list[str] = []
        return self.requested

    def wait_for(self, expression: str, timeout_s: float = 30) -> Any:
        """Evaluate ``expression`` until it is truthy; its value (raises after the timeout)."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {expression}")

    def charts_drawn(self, timeout_s: float = 60) -> int:
        """Wait until every Vega-Lite chart div of a report is drawn; their number."""
        self.wait_for(
            "[...document.querySelectorAll('div.vl-chart')]"
            ".every(d => d.getAttribute('data-drawn'))",
            timeout_s,
        )
        return int(self.evaluate("document.querySelectorAll('div.vl-chart').length"))

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return res["result"].get("value")

    def screenshot(self, out: Path, max_height: int = 12000) -> Path:
        bottom = self.evaluate("document.body.getBoundingClientRect().bottom + window.scrollY")
        height = min(int(bottom) + 24, max_height)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=1400,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        clip = {"x": 0, "y": 0, "width": 1400, "height": height, "scale": 1}
        data = self.call("Page.captureScreenshot", format="png", clip=clip)["data"]
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        return out

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.kill()
            self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)


#: Runs in the page: for every drawn chart, what the DOM says about its text and legend.
#: Each entry: [chart label, #legend entries, #series, [problems...]].
LAYOUT_CHECK = r"""
[...document.querySelectorAll('div.vl-chart')].map(div => {
  const svg = div.querySelector('svg');
  const problems = [];
  if (!svg) { return [div.getAttribute('aria-label'), 0, 0, ['no svg drawn']]; }
  const box = svg.getBoundingClientRect();
  for (const t of svg.querySelectorAll('text')) {
    const s = t.textContent || '';
    if (!s.trim()) continue;
    if (s.endsWith('…')) problems.push('truncated: ' + s);
    const b = t.getBoundingClientRect();
    if (b.width === 0) continue;
    if (b.left < box.left - 1 || b.right > box.right + 1 ||
        b.top < box.top - 1 || b.bottom > box.bottom + 1) {
      problems.push('outside its chart: ' + s);
    }
  }
  const entries = [...svg.querySelectorAll('.role-legend-symbol, .role-legend-label')]
    .filter(g => g.classList.contains('role-legend-label'))
    .flatMap(g => [...g.querySelectorAll('text')]);
  const boxes = entries.map(e => e.getBoundingClientRect());
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length; j++) {
      const a = boxes[i], b = boxes[j];
      if (a.left < b.right - 1 && b.left < a.right - 1 &&
          a.top < b.bottom - 1 && b.top < a.bottom - 1) {
        problems.push('legend entries overlap: ' + entries[i].textContent + ' / ' +
                      entries[j].textContent);
      }
    }
  }
  const spec = JSON.parse(document.getElementById(div.id + '-spec').textContent);
  const data = (spec.data && spec.data.values) || [];
  const series = new Set(data.map(r => r.s).filter(x => x !== undefined)).size;
  return [div.getAttribute('aria-label'), entries.length, series, problems];
})
"""


def layout_problems(page: Page) -> list[str]:
    """Clipped, cut or overlapping chart text, and legends whose entries differ from the
    chart's series, for every chart of the open report page (empty when all is well)."""
    out: list[str] = []
    for label, entries, series, problems in page.evaluate(LAYOUT_CHECK):
        out.extend(f"{label}: {p}" for p in problems)
        if series and entries != series:
            out.append(f"{label}: {entries} legend entries for {series} series")
    return out


def report_specs(page_html: str) -> dict[str, dict[str, Any]]:
    """The Vega-Lite spec of each chart of a report page, by the chart's title."""
    out = {}
    for m in re.finditer(
        r'aria-label="([^"]*)"></div><script type="application/json" id="[^"]*">(.*?)</script>',
        page_html,
    ):
        import html as html_mod

        out[html_mod.unescape(m.group(1))] = json.loads(m.group(2))
    return out


def series_values(spec: dict[str, Any]) -> dict[str, list[float]]:
    """``{series name: y values}`` of a line chart spec built by ``kvscope.report.charts``."""
    return {row["s"]: row["y"] for row in spec["data"]["values"]}
