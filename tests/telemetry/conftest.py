"""Fixtures for telemetry tests: recorded pages and a real HTTP server on loopback."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


class PageServer:
    """Serves ``pages[i]`` at ``/metrics``; ``advance()`` moves to the next page."""

    def __init__(self, pages: list[str]) -> None:
        self.pages = pages
        self.index = 0
        self.hits = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                owner.hits += 1
                body = owner.pages[owner.index].encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def advance(self) -> None:
        self.index = min(self.index + 1, len(self.pages) - 1)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def fixture_text() -> Callable[[str], str]:
    """``fixture_text(name)`` -> the text of ``tests/telemetry/fixtures/<name>``."""
    return lambda name: (FIXTURES / name).read_text()


@pytest.fixture
def page_server() -> Iterator[type[PageServer]]:
    servers: list[PageServer] = []

    class Factory(PageServer):
        def __init__(self, pages: list[str]) -> None:
            super().__init__(pages)
            servers.append(self)

    yield Factory
    for s in servers:
        s.close()
