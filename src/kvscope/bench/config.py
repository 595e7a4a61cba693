"""Where and how the bench sends requests: server URL, credentials, time limits, load shape.

Split from :mod:`kvscope.bench.client` (the wire format and timing) and
:mod:`kvscope.bench.runner` (the run itself), which re-export these names. Everything here is
checked when a :class:`ClientConfig` or :class:`LoadConfig` is built, so a bad value from the
Python API ends in one :class:`KvscopeError` line before any request, as a bad flag does.

Credentials never leave this module in clear text: a password inside the URL
(``http://user:PASS@host``) is registered with :mod:`kvscope.redact` and sent as HTTP Basic
auth, the request URL itself carries no userinfo (so no aiohttp error message repeats it), and
:meth:`ClientConfig.public` / :attr:`ClientConfig.public_url` are redacted. The API key is read
from ``api_key_env`` at use, registered the same way, and sent as ``Authorization: Bearer``.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kvscope.errors import KvscopeError
from kvscope.redact import basic_auth, redact_url, register_secret
from kvscope.validate import count, finite

#: Seconds a stream may stay silent (no byte from the server: before the headers, before the
#: first token or between chunks) before the request is recorded as ``timeout``. No
#: benchmark we know of has such a limit (vLLM's waits up to its 6 h request timeout), so the
#: name and default are ours: long enough for the queueing delay of an overloaded server to be
#: measured, short enough that a stalled server costs a run a minute, not the 600 s request
#: timeout.
DEFAULT_STREAM_TIMEOUT_S = 60.0


class Endpoint(enum.StrEnum):
    COMPLETIONS = "completions"
    CHAT = "chat"

    @property
    def path(self) -> str:
        return "/v1/completions" if self is Endpoint.COMPLETIONS else "/v1/chat/completions"


def normalize_base_url(url: str) -> str:
    """``http(s)://host[:port][/prefix]`` without a trailing ``/v1``; else a KvscopeError."""
    if not isinstance(url, str):
        raise KvscopeError(f"bad URL {url!r}: expected http://HOST:PORT.")
    shown = redact_url(url.strip())  # the error line must not repeat a password
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise KvscopeError(f"bad URL '{shown}': the port is not a number in 0-65535.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KvscopeError(
            f"bad URL '{shown}': expected http://HOST:PORT (an OpenAI-compatible server)."
        )
    del port
    path = parts.path.rstrip("/")
    for suffix in ("/v1/completions", "/v1/chat/completions", "/v1"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    return f"{parts.scheme}://{parts.netloc}{path}"


@dataclass(frozen=True)
class ClientConfig:
    """Where and how to send requests. The API key is read from ``api_key_env`` at use.

    ``request_timeout_s`` bounds a whole request; ``stream_timeout_s`` bounds each silence
    of the server within it (see :data:`DEFAULT_STREAM_TIMEOUT_S`).
    """

    base_url: str
    model: str
    endpoint: Endpoint = Endpoint.COMPLETIONS
    api_key_env: str = "OPENAI_API_KEY"
    request_timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    ignore_eos: bool = True
    include_usage: bool = True
    stream_timeout_s: float = DEFAULT_STREAM_TIMEOUT_S

    def __post_init__(self) -> None:
        # raises on a URL no request could go to; "/v1" or a trailing "/" is dropped
        object.__setattr__(self, "base_url", normalize_base_url(self.base_url))
        if not isinstance(self.model, str) or not self.model.strip():
            raise KvscopeError("--model must name the model to put in each request.")
        try:
            # frozen: set once here, so a plain "chat" from the Python API works like the enum
            object.__setattr__(self, "endpoint", Endpoint(self.endpoint))
        except ValueError:
            raise KvscopeError(
                f"--endpoint must be completions or chat, not '{self.endpoint}'."
            ) from None
        finite(self.request_timeout_s, "--request-timeout", low=0, low_open=True)
        finite(self.connect_timeout_s, "the connect timeout", low=0, low_open=True)
        finite(self.stream_timeout_s, "--stream-timeout", low=0, low_open=True)
        basic_auth(self.base_url)  # registers the URL's password for redaction

    @property
    def url(self) -> str:
        """The request URL (no userinfo: credentials travel in the Authorization header)."""
        return basic_auth(self.base_url)[0] + self.endpoint.path

    @property
    def public_url(self) -> str:
        """The base URL as it may be written or printed (no credentials)."""
        return redact_url(self.base_url)

    def api_key(self) -> str:
        """The API key from ``api_key_env`` (empty when unset), registered for redaction."""
        key = os.environ.get(self.api_key_env, "") if self.api_key_env else ""
        register_secret(key)
        return key

    def headers(self) -> dict[str, str]:
        """Request headers: JSON in, SSE out, and the one Authorization the server gets."""
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        key = self.api_key()
        _, basic = basic_auth(self.base_url)
        if key and basic is not None:
            # A request carries one Authorization header: guessing which one the server wants
            # would show up only as 401s in the results.
            raise KvscopeError(
                f"the URL carries user:password and ${self.api_key_env} holds an API key; "
                "a request has one Authorization header.",
                hint=f"Drop the credentials from --url, or unset ${self.api_key_env}.",
            )
        if key:
            h["Authorization"] = f"Bearer {key}"
        elif basic is not None:
            h["Authorization"] = basic
        return h

    def public(self) -> dict[str, Any]:
        """The configuration as it may be written out (never the key or a password)."""
        return {
            "url": self.public_url,
            "model": self.model,
            "endpoint": str(self.endpoint),
            "api_key_env": self.api_key_env,
            "api_key_set": bool(self.api_key()),
            "url_credentials": basic_auth(self.base_url)[1] is not None,
            "request_timeout_s": self.request_timeout_s,
            "stream_timeout_s": self.stream_timeout_s,
            "ignore_eos": self.ignore_eos,
        }


@dataclass(frozen=True)
class LoadConfig:
    """How requests are released and which part of the run counts."""

    max_concurrency: int | None = None
    closed_loop: int | None = None
    think_s: float = 0.0
    warmup_s: float = 0.0
    cooldown_s: float = 0.0
    scrape_interval_s: float | None = 0.25
    drain_timeout_s: float = 60.0
    #: Closed loop only: stop issuing new requests this many seconds after the start (those in
    #: flight then finish, as an open-loop run drains after its last release); None: run
    #: until every prepared request was sent.
    duration_s: float | None = None

    def __post_init__(self) -> None:
        # checked here, not only at the flags, so the Python API cannot start a run that
        # would end in a traceback (or never end) after minutes of measuring
        if self.max_concurrency is not None:
            count(self.max_concurrency, "--max-concurrency", low=1)
        if self.closed_loop is not None:
            count(self.closed_loop, "the closed loop's concurrency", low=1)
        finite(self.think_s, "the think time", low=0)
        finite(self.warmup_s, "--warmup", low=0)
        finite(self.cooldown_s, "--cooldown", low=0)
        if self.scrape_interval_s is not None:
            finite(self.scrape_interval_s, "--scrape-interval", low=0.05, high=60)
        finite(self.drain_timeout_s, "the drain timeout", low=0, low_open=True)
        if self.duration_s is not None:
            finite(self.duration_s, "--duration", low=0, low_open=True)

    def describe(self) -> dict[str, Any]:
        return {
            "mode": "closed" if self.closed_loop else "open",
            "closed_loop_concurrency": self.closed_loop,
            "think_s": self.think_s,
            "max_concurrency": self.max_concurrency,
            "warmup_s": self.warmup_s,
            "cooldown_s": self.cooldown_s,
            "scrape_interval_s": self.scrape_interval_s,
            "drain_timeout_s": self.drain_timeout_s,
            "duration_s": self.duration_s,
        }
