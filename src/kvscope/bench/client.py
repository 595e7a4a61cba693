"""The streaming HTTP client: one OpenAI-compatible request, timed chunk by chunk.

Owns the wire format (``/v1/completions`` and ``/v1/chat/completions`` with ``stream=true``,
Server-Sent Events), the shared connection pool and the error classes. Every timestamp comes
from ``time.perf_counter`` (monotonic) relative to the run's start, in seconds:

* ``sent_s``: just before the request is handed to the connection pool;
* ``first_byte_s``: response headers received;
* ``chunk_times``: each SSE event carrying generated text (several events read together
  share their read time — they did arrive together);
* ``first_token_s``: the first such event; ``end_s``: the stream's end.

Metric definitions follow vLLM's benchmark (vllm/benchmarks/serve.py), the de-facto reference:
TTFT counts to the first chunk with non-empty text, TPOT excludes the first token, ITL is each
gap between chunks. Output tokens come from the stream's final ``usage`` (requested with
``stream_options.include_usage``); when a server sends none, content chunks are counted.

The shared pool, and when a request goes out again because the pool handed it a connection
the server had already closed, belong to :mod:`kvscope.bench.pool`; ``sent_s`` stays the
first send's time, so a resend's delay counts in the request's latency.

Two time limits (:class:`~kvscope.bench.config.ClientConfig`): ``request_timeout_s`` bounds a
whole request, ``stream_timeout_s`` each silence of the server (aiohttp's ``sock_read``,
restarted on every read), so a server that stalls after its headers or mid-answer costs one
stream timeout, not the request timeout. Every failure becomes an error class on the request's
row, never an exception out of :func:`stream_request`; its text is redacted
(:func:`kvscope.redact.redact_text`) because servers echo what they were sent.
"""

from __future__ import annotations

import asyncio
import enum
import json
import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from kvscope.bench.config import ClientConfig as ClientConfig
from kvscope.bench.config import Endpoint as Endpoint
from kvscope.bench.config import normalize_base_url as normalize_base_url
from kvscope.bench.pool import MAX_RESENDS, Attempt, stale_connection
from kvscope.redact import redact_text

#: Where a token chunk's text starts: ``"text":"`` (completions) or ``"content":"`` (chat).
_TEXT_KEY = re.compile(rb'"(?:text|content|reasoning_content)"\s*:\s*"')
#: Keys opening a chunk's text, compact JSON (as vLLM, SGLang and llama.cpp write it).
_TEXT_OPEN = {False: (b'"text":"',), True: (b'"content":"', b'"reasoning_content":"')}
#: Below this many bytes a read is parsed event by event (as quick for a few events).
_BULK_MIN_BYTES = 4096
#: Lines after an answer's last token chunk: the final chunk, usage, ``[DONE]`` and their
#: blank lines, with room to spare.
_TAIL_LINES = 16
NAN = math.nan
#: Characters of error text kept per request, and bytes of an error page read to make them
#: (far more than kept, so a secret near the start is whole when it is redacted).
ERROR_CHARS = 200
ERROR_BODY_BYTES = 8192
#: An SSE line longer than this is not an OpenAI stream: refuse it rather than buffer it.
MAX_LINE_BYTES = 64 * 1024 * 1024
#: Token counts a server may report (larger ones are garbage; they would overflow int64).
MAX_TOKENS = 2**40


def _no_usage(data: bytes) -> bool:
    """No usage figures in ``data``: no ``usage`` key, or only ``"usage":null`` ones.

    OpenAI's API puts ``"usage":null`` in every chunk but the last when usage is asked for
    (``stream_options.include_usage``); vLLM leaves the key out.
    """
    n = data.count(b'"usage"')
    return n == 0 or n == data.count(b'"usage":null')


class ErrorKind(enum.StrEnum):
    """Why a request did not complete normally (counted apart from latency statistics)."""

    HTTP_STATUS = "http_status"
    TIMEOUT = "timeout"
    CONNECTION_REFUSED = "connection_refused"
    CONNECTION_RESET = "connection_reset"
    MALFORMED_STREAM = "malformed_stream"
    SERVER_ERROR = "server_error"  # an ``{"error": ...}`` event inside a 200 stream
    EARLY_STOP = "early_stop"  # ended cleanly with fewer tokens than asked under ignore_eos
    CANCELLED = "cancelled"  # still running when the run was interrupted


def make_body(cfg: ClientConfig, prompt: str, max_tokens: int, stream: bool = True) -> bytes:
    """The JSON body of one request."""
    body: dict[str, Any] = {"model": cfg.model, "max_tokens": max_tokens, "stream": stream}
    if cfg.endpoint is Endpoint.CHAT:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if stream and cfg.include_usage:
        body["stream_options"] = {"include_usage": True}
    if cfg.ignore_eos:
        # vLLM, SGLang and llama.cpp's server accept ``ignore_eos`` (an extension, not OpenAI).
        body["ignore_eos"] = True
        body["min_tokens"] = max_tokens
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass(slots=True)
class Trace:
    """One request in flight: its schedule, its timestamps (s from run start), its outcome."""

    index: int
    request_id: str
    scheduled_s: float
    target_prompt_tokens: int
    target_output_tokens: int
    released_s: float = NAN
    sent_s: float = NAN
    first_byte_s: float = NAN
    first_token_s: float = NAN
    end_s: float = NAN
    chunk_times: list[float] = field(default_factory=list)
    usage_prompt_tokens: int = -1
    usage_output_tokens: int = -1
    cached_prompt_tokens: int = 0
    http_status: int = 0
    finish_reason: str = ""
    done_marker: bool = False
    error_kind: str = ""
    error: str = ""
    resends: int = 0

    @property
    def output_tokens(self) -> int:
        return self.usage_output_tokens if self.usage_output_tokens >= 0 else len(self.chunk_times)

    def fail(self, kind: ErrorKind, text: str) -> None:
        """Record the first failure; its text is redacted (a server may echo the API key)."""
        if not self.error_kind:
            self.error_kind = str(kind)
            # redact before cutting: a cut secret would no longer match its registered form
            self.error = (redact_text(text) or "")[:ERROR_CHARS]


#: What parsing a garbage stream raises (bad JSON, wrong types, absurd numbers, deep nesting).
_GARBAGE = (
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    AttributeError,
    ArithmeticError,
    RecursionError,
)


def _classify(err: BaseException, cfg: ClientConfig) -> tuple[ErrorKind, str]:
    if isinstance(err, aiohttp.SocketTimeoutError):
        return ErrorKind.TIMEOUT, f"the server sent nothing for {cfg.stream_timeout_s:g} s"
    if isinstance(err, aiohttp.ConnectionTimeoutError):
        return ErrorKind.TIMEOUT, f"no connection within {cfg.connect_timeout_s:g} s"
    if isinstance(err, asyncio.TimeoutError | aiohttp.ServerTimeoutError):
        return ErrorKind.TIMEOUT, f"no complete answer within {cfg.request_timeout_s:g} s"
    if isinstance(err, aiohttp.ClientConnectorError):
        return ErrorKind.CONNECTION_REFUSED, f"cannot connect: {err.os_error.strerror or err}"
    if isinstance(err, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError):
        return ErrorKind.CONNECTION_RESET, "server closed the connection mid-request"
    if isinstance(err, aiohttp.ClientOSError | ConnectionError):
        return ErrorKind.CONNECTION_RESET, f"connection error: {err}"
    if isinstance(err, _GARBAGE):
        return ErrorKind.MALFORMED_STREAM, f"unparsable stream: {type(err).__name__}: {err}"
    return ErrorKind.CONNECTION_RESET, f"{type(err).__name__}: {err}"


class StreamParser:
    """Incremental SSE parser: feed bytes with their read time, it fills a :class:`Trace`."""

    __slots__ = ("_buf", "chat", "trace")

    def __init__(self, trace: Trace, chat: bool) -> None:
        self.trace = trace
        self.chat = chat
        self._buf = b""

    def feed(self, data: bytes, t: float) -> None:
        buf = self._buf + data if self._buf else data
        start = self._count_plain_run(buf, t)
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line = buf[start:nl]
            start = nl + 1
            if line.startswith(b"data:"):
                self._event(line[5:].strip(), t)
            # blank lines end events; "event:", "id:" and ":" comment lines carry nothing here
        self._buf = buf[start:]
        if len(self._buf) > MAX_LINE_BYTES:
            raise ValueError(f"an event line over {MAX_LINE_BYTES >> 20} MiB")

    def _count_plain_run(self, buf: bytes, t: float) -> int:
        """Count the leading run of plain token chunks with byte searches; return where it ends.

        A server that writes a whole answer at once hands over hundreds of events in one
        read; one Python call per event would hold the event loop for a millisecond or more,
        and a release due meanwhile would be late. The run stops before the last plain chunk's
        successors (finish reason, usage, ``[DONE]``: parsed event by event). In the run every
        ``data:`` line must carry ``"finish_reason":null`` and no usage (one choice per chunk,
        as the client asks), so its tokens are the text keys opening a non-empty string. A
        JSON string cannot hold an unescaped quote, so the searched keys never match inside
        generated text; a stray ``data:`` inside text only sends the read to the slow path.
        Anything else (spaced JSON, several choices, an error) is left to the per-event parse.
        """
        end = buf.rfind(b"\n") + 1
        if end < _BULK_MIN_BYTES:
            return 0
        for _ in range(_TAIL_LINES):  # walk back over the tail: blank lines, [DONE], usage...
            if end <= 0:
                return 0
            start = buf.rfind(b"\n", 0, end - 1) + 1
            line = buf[start:end]
            if b'"finish_reason":null' in line and _no_usage(line):
                break
            end = start
        else:
            return 0  # no plain chunk near the end (spaced JSON, say): per event it is
        run = buf[:end]
        events = run.count(b"data:")
        if not events or run.count(b'"finish_reason":null') != events or not _no_usage(run):
            return 0
        tokens = 0
        for key in _TEXT_OPEN[self.chat]:
            tokens += run.count(key) - run.count(key + b'"')
        if tokens > events:
            return 0
        if tokens:
            tr = self.trace
            if not tr.chunk_times:
                tr.first_token_s = t
            tr.chunk_times.extend([t] * tokens)
        return end

    def close(self, t: float) -> None:
        if self._buf.strip().startswith(b"data:"):  # last event without its newline
            self._event(self._buf.strip()[5:].strip(), t)
        self._buf = b""

    def _event(self, payload: bytes, t: float) -> None:
        tr = self.trace
        if payload == b"[DONE]":
            tr.done_marker = True
            return
        if (
            b'"finish_reason":null' in payload
            and _no_usage(payload)
            and b'"error"' not in payload
            and payload[:1] == b"{"
            and payload[-1:] == b"}"
        ):
            # Fast path for the common mid-stream token chunk (compact JSON as vLLM, SGLang and
            # llama.cpp send it): only "is there text" matters, so skip the full JSON parse.
            # A JSON string cannot contain an unescaped quote, so the key pattern cannot match
            # inside generated text.
            m = _TEXT_KEY.search(payload)
            if m is not None and payload[m.end() : m.end() + 1] != b'"':
                if not tr.chunk_times:
                    tr.first_token_s = t
                tr.chunk_times.append(t)
            return
        obj = json.loads(payload)
        if not isinstance(obj, dict):
            raise ValueError("event is not a JSON object")
        if "error" in obj:
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            tr.fail(ErrorKind.SERVER_ERROR, f"server error event: {msg}")
            return
        choices = obj.get("choices")
        if choices:
            c = choices[0]
            if self.chat:
                delta = c.get("delta") or {}
                text = delta.get("content") or delta.get("reasoning_content")
            else:
                text = c.get("text")
            if text:
                if not tr.chunk_times:
                    tr.first_token_s = t
                tr.chunk_times.append(t)
            reason = c.get("finish_reason")
            if reason:
                tr.finish_reason = str(reason)[:64]
        elif choices is None and "usage" not in obj:
            raise ValueError("event has neither choices nor usage")
        usage = obj.get("usage")
        if usage:
            tr.usage_prompt_tokens = _tokens(usage.get("prompt_tokens", -1))
            tr.usage_output_tokens = _tokens(usage.get("completion_tokens", -1))
            details = usage.get("prompt_tokens_details") or {}
            tr.cached_prompt_tokens = max(0, _tokens(details.get("cached_tokens") or 0))


def _tokens(value: Any) -> int:
    """A token count from a server's usage (-1: not reported); garbage raises ValueError."""
    if value is None:
        return -1
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"usage count {str(value)[:40]!r} is not a number")
    if not -1 <= value <= MAX_TOKENS or value != int(value):
        raise ValueError(f"usage count {str(value)[:40]} is out of range")
    return int(value)


async def _read_answer(
    resp: aiohttp.ClientResponse, parser: StreamParser, trace: Trace, t0: float
) -> None:
    clock = time.perf_counter
    trace.http_status = resp.status
    if resp.status != 200:
        text = (await resp.content.read(ERROR_BODY_BYTES)).decode("utf-8", "replace")
        trace.fail(ErrorKind.HTTP_STATUS, f"http {resp.status}: {' '.join(text.split())}")
    elif not resp.content_type.startswith("text/event-stream"):
        trace.fail(
            ErrorKind.MALFORMED_STREAM,
            f"response is {resp.content_type or 'untyped'}, not an event stream",
        )
    else:
        async for data in resp.content.iter_any():
            parser.feed(data, clock() - t0)
        parser.close(clock() - t0)


async def stream_request(
    session: aiohttp.ClientSession,
    cfg: ClientConfig,
    headers: dict[str, str],
    body: bytes,
    trace: Trace,
    t0: float,
) -> None:
    """Send one streaming request and record everything about it in ``trace``."""
    clock = time.perf_counter
    parser = StreamParser(trace, cfg.endpoint is Endpoint.CHAT)
    trace.sent_s = clock() - t0
    while True:
        attempt = Attempt()
        try:
            async with session.post(
                cfg.url, data=body, headers=headers, trace_request_ctx=attempt
            ) as resp:
                trace.first_byte_s = clock() - t0
                await _read_answer(resp, parser, trace, t0)
        except asyncio.CancelledError:
            trace.fail(ErrorKind.CANCELLED, "run interrupted before the answer finished")
            trace.end_s = clock() - t0
            raise
        except Exception as err:  # every failure is data: classify and keep the request
            answered = not math.isnan(trace.first_byte_s)
            if trace.resends < MAX_RESENDS and stale_connection(err, attempt, answered):
                trace.resends += 1
                continue
            kind, text = _classify(err, cfg)
            trace.fail(kind, text)
        break
    trace.end_s = clock() - t0
    if trace.error_kind:
        return
    if not trace.done_marker and not trace.finish_reason:
        trace.fail(ErrorKind.CONNECTION_RESET, "stream ended without a finish reason or [DONE]")
    elif not trace.chunk_times and trace.usage_output_tokens <= 0:
        trace.fail(ErrorKind.MALFORMED_STREAM, "stream carried no generated text")
    elif cfg.ignore_eos and trace.output_tokens < trace.target_output_tokens:
        trace.fail(
            ErrorKind.EARLY_STOP,
            f"early stop: {trace.output_tokens} of {trace.target_output_tokens} tokens "
            f"({trace.finish_reason or 'no reason'})",
        )
