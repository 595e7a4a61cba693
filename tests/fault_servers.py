"""Loopback servers that fail the way a wrong ``--engine`` URL fails, for the watch tests.

* :func:`refused_port`: a port nothing listens on (bound, then closed): connection refused.
* :class:`SilentServer`: accepts TCP connections and never sends a byte (a hung process, or
  a port of something that is not HTTP): the scrape times out.
* :class:`FaultyHttp`: a real aiohttp server on its own event loop thread whose ``/metrics``
  answers by ``mode``: ``"404"``, ``"500"``, ``"html"`` (200, a web page), ``"other"`` (200, a
  Prometheus page of no engine) or ``"ok"`` (200, a recorded vLLM page). The mode can change
  while a watch runs (an engine that comes back).
"""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

from aiohttp import web

VLLM_PAGE = (
    Path(__file__).parent / "telemetry" / "fixtures" / "vllm_0_33_0_metrics_t1.txt"
).read_text()
OTHER_PAGE = (
    "# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.42\n"
    "# HELP node_boot_time_seconds Boot time.\n# TYPE node_boot_time_seconds gauge\n"
    "node_boot_time_seconds 1.7e9\n"
)


def refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed on leaving: nothing listens there


class SilentServer:
    """Accepts and holds connections without answering."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self.sock.settimeout(0.1)
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for c in self._held:
            c.close()
        self.sock.close()


class LoopbackAiohttp:
    """A real aiohttp server on 127.0.0.1 on its own event-loop thread; subclasses add
    their routes in :meth:`routes`. Started when built, stopped by :meth:`close`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("aiohttp test server did not start")

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        server = site._server
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])
        self._ready.set()
        self.loop.run_forever()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        if self._runner is not None:
            fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop)
            fut.result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


class FaultyHttp(LoopbackAiohttp):
    """An aiohttp server whose ``/metrics`` answers as ``mode`` says."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests = 0
        super().__init__()

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/metrics", self._metrics)

    async def _metrics(self, _request: web.Request) -> web.Response:
        self.requests += 1
        if self.mode in ("404", "500"):
            return web.Response(status=int(self.mode), text="no such page\n")
        if self.mode == "html":
            return web.Response(text="<html><body>Welcome</body></html>", content_type="text/html")
        return web.Response(text=OTHER_PAGE if self.mode == "other" else VLLM_PAGE)
