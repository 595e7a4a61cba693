"""Checks of watch's --kv-events options at the boundary (one line, exit 2, before any I/O)."""

from __future__ import annotations

import re

from kvscope.errors import KvscopeError
from kvscope.telemetry.kv_events.live import KvEventsLive

_TCP = re.compile(r"^tcp://(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


def endpoint(url: str, flag: str) -> str:
    m = _TCP.match(url)
    if m is None or not 0 < int(m.group(2)) <= 65535:
        raise KvscopeError(
            f"{flag} {url!r} is not tcp://HOST:PORT (the engine's publisher to connect to)."
        )
    return url


def kv_events_live(endpoints: list[str], topic: str, replay: list[str]) -> KvEventsLive:
    if not endpoints:
        raise KvscopeError("--kv-events-replay needs --kv-events (the stream to recover).")
    if len(replay) > len(endpoints):
        raise KvscopeError(
            f"{len(replay)} --kv-events-replay for {len(endpoints)} --kv-events: one per stream."
        )
    eps = tuple(endpoint(u, "--kv-events") for u in endpoints)
    reps = tuple(endpoint(u, "--kv-events-replay") for u in replay)
    return KvEventsLive(eps, topic=topic, replay=reps)
