"""A lean HTTP/1.1 GET client for scraping ``/metrics`` many times a second.

``http.client`` parses every response's headers through the ``email`` package, which costs
about half a millisecond of CPU per scrape -- a quarter of the whole 10 Hz budget. Scrapes
only need the status, ``Content-Length`` or chunked framing, and ``Connection``; this client
reads exactly those over one persistent socket (RFC 9112: message framing, section 6;
chunked coding, section 7.1) and reconnects when the server closes.
"""

from __future__ import annotations

import socket

from kvscope.errors import KvscopeError

_MAX_HEADER = 64 * 1024
#: Largest response body read: a vLLM page is ~50 KB; a server (or something else on the
#: port) announcing more is refused rather than buffered until memory runs out.
MAX_BODY = 64 * 2**20


class HttpGetter:
    """GETs paths from one ``host:port`` over a kept-alive connection."""

    def __init__(self, host: str, port: int, timeout_s: float, auth: str | None = None) -> None:
        self.host, self.port, self.timeout_s = host, port, timeout_s
        #: ``Authorization`` header value (Basic credentials taken from the URL), if any.
        self.auth = auth
        self._sock: socket.socket | None = None
        self._buf = b""

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buf = b""

    def get(self, path: str) -> bytes:
        """Body of ``GET path``; KvscopeError on a non-200 status or a broken connection."""
        for attempt in (0, 1):
            fresh = self._sock is None
            try:
                if self._sock is None:
                    self._sock = socket.create_connection((self.host, self.port), self.timeout_s)
                    self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                auth = f"Authorization: {self.auth}\r\n" if self.auth else ""
                req = (
                    f"GET {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{auth}"
                    "Accept: text/plain\r\nConnection: keep-alive\r\n\r\n"
                )
                self._sock.sendall(req.encode("ascii"))
                status, body, close = self._response()
            except (OSError, _Closed, ValueError, UnicodeError) as err:
                # ValueError: a status, length or chunk size that is not a number (whatever
                # answered is not an HTTP server); UnicodeError: a host name IDNA refuses.
                self.close()
                if attempt or fresh:
                    raise KvscopeError(
                        f"cannot scrape {self.host}:{self.port}{path}: {err}"
                    ) from err
                continue  # a kept-alive connection the server had closed: retry once, fresh
            if close:
                self.close()
            if status != 200:
                raise KvscopeError(f"cannot scrape {self.host}:{self.port}{path}: HTTP {status}")
            return body
        raise AssertionError("unreachable")  # pragma: no cover

    def _fill(self) -> None:
        assert self._sock is not None
        chunk = self._sock.recv(65536)
        if not chunk:
            raise _Closed("connection closed by the server")
        self._buf += chunk

    def _line(self) -> bytes:
        while (i := self._buf.find(b"\r\n")) < 0:
            if len(self._buf) > _MAX_HEADER:
                raise _Closed("header line too long")
            self._fill()
        line, self._buf = self._buf[:i], self._buf[i + 2 :]
        return line

    def _exact(self, n: int) -> bytes:
        if n > MAX_BODY or n < 0:
            raise _Closed(f"response body of {n:,} bytes (over {MAX_BODY:,})")
        while len(self._buf) < n:
            self._fill()
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def _response(self) -> tuple[int, bytes, bool]:
        status_line = self._line()
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
            raise _Closed(f"bad status line {status_line[:40]!r}")
        status = int(parts[1])
        close = parts[0] == b"HTTP/1.0"
        length: int | None = None
        chunked = False
        while line := self._line():
            name, _, value = line.partition(b":")
            key, val = name.strip().lower(), value.strip().lower()
            if key == b"content-length":
                length = int(val)
            elif key == b"transfer-encoding":
                chunked = b"chunked" in val
            elif key == b"connection":
                close = val == b"close" or (close and val != b"keep-alive")
        if chunked:
            chunks: list[bytes] = []
            total = 0
            while size := int(self._line().split(b";")[0], 16):
                total += size
                chunks.append(self._exact(size if total <= MAX_BODY else total))
                self._line()
            while self._line():  # trailers
                pass
            return status, b"".join(chunks), close
        if length is not None:
            return status, self._exact(length), close
        # Neither length nor chunks: the body runs to the end of the connection.
        try:
            while len(self._buf) <= MAX_BODY:
                self._fill()
        except _Closed:
            pass
        if len(self._buf) > MAX_BODY:
            raise _Closed(f"response body over {MAX_BODY:,} bytes")
        rest, self._buf = self._buf, b""
        return status, rest, True


class _Closed(Exception):
    """The connection ended or sent something that is not HTTP/1.x."""
