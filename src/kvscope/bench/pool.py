"""The run's connection pool, and when a request may go out again on a fresh connection.

One :class:`aiohttp.ClientSession` serves a whole run: no connection cap (``limit=0``; a hidden
cap silently lowers concurrency, GuideLLM issue #487, httpx's default of 100) and a 4 MiB read
buffer (aiohttp's 64 KiB default throttles long prompts and answers, vLLM issue #39963).

Pooling has one hazard a benchmark must not count as the server failing: a connection the
server has already closed can still sit in the pool when the next request takes it. The
server then never sees that request; the client gets a write error, a reset or an early end
of stream before any byte of an answer. Servers close such connections routinely:

* after their keep-alive idle limit (5 s in uvicorn, which vLLM and SGLang serve through, and
  in cpp-httplib, which llama.cpp's server uses);
* after every streamed answer: llama.cpp's ``llama-server`` (tools/server/server-http.cpp)
  returns ``false`` from its chunked content provider once the stream is done, and
  cpp-httplib (``write_content_chunked``) treats that as a cancelled write and closes the
  connection, although the answer was complete. A request that takes that connection in the
  moment before the close reaches the client fails at once: 3 of 960 requests with four
  spinning processes beside the run on two cores (``benchmarks/bench_pool_llama_server.py``).

RFC 9112 section 9.3.1 lets a client resend a non-idempotent request automatically when it
can tell the request was never applied; Go's ``net/http`` and Chromium resend on a reused
connection that fails before any response byte for the same reason. A completion request
changes no server state, so :func:`stale_connection` allows that resend, only when the
connection came from the pool and nothing of an answer arrived; each resend is counted on the
request's row (``resends``), so nothing is hidden. A failure on a fresh connection is final.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiohttp

from kvscope.bench.config import ClientConfig

READ_BUFSIZE = 4 * 1024 * 1024
#: Times one request may be sent again after the pool handed it a closed connection.
MAX_RESENDS = 2
#: What a closed pooled connection raises: a refused write, a reset, an end of stream.
_CLOSED_CONNECTION_ERRORS = (
    aiohttp.ClientOSError,
    aiohttp.ServerDisconnectedError,
    ConnectionResetError,  # aiohttp's "cannot write to closing transport" is one
)


class Attempt:
    """One send of a request: whether the pool gave it a connection already used."""

    __slots__ = ("reused",)

    def __init__(self) -> None:
        self.reused = False


async def _mark_reused(_session: aiohttp.ClientSession, ctx: SimpleNamespace, _params: Any) -> None:
    attempt = getattr(ctx, "trace_request_ctx", None)
    if isinstance(attempt, Attempt):
        attempt.reused = True


def make_session(cfg: ClientConfig) -> aiohttp.ClientSession:
    """One shared pool for the whole run: no connection cap, large read buffer."""
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=3600)
    timeout = aiohttp.ClientTimeout(
        total=cfg.request_timeout_s,
        sock_connect=cfg.connect_timeout_s,
        # aiohttp restarts this timer on every read from the socket: it bounds each silence
        # of the server (headers, first token, between chunks), not the whole answer
        sock_read=cfg.stream_timeout_s,
    )
    reuse = aiohttp.TraceConfig()
    reuse.on_connection_reuseconn.append(_mark_reused)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        read_bufsize=READ_BUFSIZE,
        auto_decompress=False,
        skip_auto_headers=("User-Agent",),
        trace_configs=[reuse],
    )


def stale_connection(err: BaseException, attempt: Attempt, answered: bool) -> bool:
    """Whether ``err`` is the pool's closed connection, so the request never reached the server.

    ``answered``: whether any byte of a response (its status line) had arrived.
    """
    if answered or not attempt.reused:
        return False
    # a connect error is an OSError too, but only a fresh connection connects
    closed = isinstance(err, _CLOSED_CONNECTION_ERRORS)
    return closed and not isinstance(err, aiohttp.ClientConnectorError)
