"""The lean HTTP/1.1 client against real servers on loopback: Content-Length keep-alive,
HTTP/1.0 close-delimited, chunked, errors and servers that drop kept-alive connections."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.telemetry.scrape_http import HttpGetter

BODY = b"vllm:num_requests_running 3.0\n" * 200


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = BODY
    connections: ClassVar[set[int]] = set()

    def do_GET(self) -> None:
        Handler.connections.add(id(self.connection))
        if self.path == "/missing":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/chunked"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(self.body), 1000):
                part = self.body[i : i + 1000]
                self.wfile.write(f"{len(part):x};ext=1\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\nX-Trailer: 1\r\n\r\n")
            return
        self.send_response(200)
        if self.path != "/no-length":
            self.send_header("Content-Length", str(len(self.body)))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, int]]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield "127.0.0.1", int(srv.server_address[1])
    srv.shutdown()
    srv.server_close()


@pytest.mark.integration
def test_keep_alive_reuses_one_connection(server: tuple[str, int]) -> None:
    Handler.connections = set()
    g = HttpGetter(*server, timeout_s=5)
    for _ in range(5):
        assert g.get("/metrics") == BODY
    assert len(Handler.connections) == 1
    g.close()


@pytest.mark.integration
def test_chunked_and_close_delimited_bodies(server: tuple[str, int]) -> None:
    g = HttpGetter(*server, timeout_s=5)
    assert g.get("/chunked") == BODY
    assert g.get("/no-length") == BODY
    assert g.get("/metrics") == BODY  # reconnected after the close
    with pytest.raises(KvscopeError, match="HTTP 404"):
        g.get("/missing")
    assert g.get("/metrics") == BODY


@pytest.mark.integration
def test_server_that_drops_kept_alive_connections(server: tuple[str, int]) -> None:
    g = HttpGetter(*server, timeout_s=5)
    assert g.get("/metrics") == BODY
    assert g._sock is not None
    g._sock.shutdown(socket.SHUT_RDWR)  # as if the server timed the idle connection out
    assert g.get("/metrics") == BODY


def test_refused_connection_is_a_user_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(KvscopeError, match="cannot scrape"):
        HttpGetter("127.0.0.1", port, timeout_s=1).get("/metrics")


@pytest.mark.integration
@settings(max_examples=15, deadline=None)
@given(st.binary(min_size=0, max_size=5000))
def test_any_body_round_trips(body: bytes) -> None:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (Handler,), {"body": body}))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        g = HttpGetter("127.0.0.1", int(srv.server_address[1]), timeout_s=5)
        assert g.get("/metrics") == body
        assert g.get("/chunked") == body
        g.close()
    finally:
        srv.shutdown()
        srv.server_close()
