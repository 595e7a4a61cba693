"""Server-side sampling during a bench run: the engine's Prometheus ``/metrics`` page.

One function, :func:`parse_metrics`, maps an exposition page onto a fixed set of canonical
columns (``kv_cache_usage_frac``, ``requests_running``, ...), summing counts over label sets
(one per engine/replica) and taking the largest fraction. :class:`ServerProbe` polls the
page every ``interval_s`` on the bench's own connection pool and appends one row per scrape
to ``server.parquet`` (``t_s`` first, seconds on the bench clock; NaN where the engine has
no such metric).

The engine metric names come from the one catalogue, :mod:`kvscope.telemetry.catalogue`
(vLLM, SGLang and llama.cpp, renamed and older names included): each column here reads one or
more of its entries. Where several label sets carry a value (data-parallel ranks), counts add
up and the KV fraction takes the fullest rank -- a bench asks whether any rank filled up,
where ``kvscope watch`` reports the mean. llama.cpp's cached prompt tokens count as prefix
cache hits.

Only lines of catalogued names are handed to ``prometheus_client``'s parser, so a large vLLM
page (hundreds of histogram buckets) costs little time on the bench's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from kvscope.redact import redact_text, redact_url
from kvscope.telemetry.catalogue import BY_NAME, Kind

#: column -> the catalogue entries that feed it (:mod:`kvscope.telemetry.catalogue`).
_ENTRIES: dict[str, tuple[str, ...]] = {
    "kv_cache_usage_frac": ("kv_cache_usage_ratio",),
    "requests_running": ("requests_running",),
    "requests_waiting": ("requests_waiting",),
    "preemptions_total": ("preemptions",),
    "prompt_tokens_total": ("prompt_tokens",),
    "generation_tokens_total": ("generation_tokens",),
    "prefix_cache_queries_total": ("prefix_cache_queries_tokens",),
    "prefix_cache_hits_total": ("prefix_cache_hits_tokens", "cached_prompt_tokens"),
    "busy_slots_per_decode": ("busy_slots_per_decode",),
}


def _names(entry: str) -> tuple[str, ...]:
    """Exposition names of a catalogue entry, current ones first (counters with ``_total``)."""
    e = BY_NAME[entry]
    suffix = "_total" if e.kind is Kind.COUNTER else ""
    return tuple(n + suffix for n in e.sources + e.deprecated)


#: column -> the engine metric names that feed it (earlier ones preferred when a page has
#: several, as a vLLM page of the rename's release has the old and the new KV gauge).
CATALOGUE: dict[str, tuple[str, ...]] = {
    col: tuple(n for entry in entries for n in _names(entry)) for col, entries in _ENTRIES.items()
}
COLUMNS: tuple[str, ...] = tuple(CATALOGUE)
_SOURCE = {name: col for col, names in CATALOGUE.items() for name in names}
_PREFIXES = tuple(sorted({n.split(":")[0] + ":" for n in _SOURCE}))

SERVER_SCHEMA = pa.schema(
    [("t_s", pa.float64()), ("scrape_ok", pa.bool_()), ("scrape_latency_s", pa.float64())]
    + [(c, pa.float64()) for c in COLUMNS]
)


def _relevant(text: str) -> str:
    keep = []
    for line in text.splitlines():
        body = line[7:] if line.startswith(("# HELP ", "# TYPE ")) else line
        if body.startswith(_PREFIXES):
            name = body.split("{", 1)[0].split(" ", 1)[0]
            if name in _SOURCE or name.removesuffix("_total") + "_total" in _SOURCE:
                keep.append(line)
    return "\n".join(keep) + "\n"


def parse_metrics(text: str) -> dict[str, float]:
    """Canonical figures of one ``/metrics`` page; absent ones are left out.

    Raises ``ValueError`` when the page is not Prometheus text.
    """
    found: dict[str, tuple[int, float]] = {}  # column -> (rank of source name, summed value)
    for family in text_string_to_metric_families(_relevant(text)):
        for sample in family.samples:
            col = _SOURCE.get(sample.name)
            if col is None:
                continue
            rank = CATALOGUE[col].index(sample.name)
            prev = found.get(col)
            if prev is None or rank < prev[0]:
                found[col] = (rank, float(sample.value))
            elif rank == prev[0]:  # more label sets: counts add up, fractions take the max
                v = float(sample.value)
                found[col] = (rank, max(prev[1], v) if col.endswith("_frac") else prev[1] + v)
    return {col: v for col, (_, v) in found.items()}


def metrics_url(base_url: str) -> str:
    """Where the engine serves Prometheus text (on its API port for vLLM, SGLang, llama.cpp)."""
    return base_url + "/metrics"


#: A ``/metrics`` page larger than this is not read (a vLLM page is well under 1 MiB).
MAX_PAGE_BYTES = 32 * 1024 * 1024


async def _read_page(resp: aiohttp.ClientResponse) -> str:
    data = bytearray()
    async for chunk in resp.content.iter_any():
        data += chunk
        if len(data) > MAX_PAGE_BYTES:
            raise ValueError(f"the page is over {MAX_PAGE_BYTES >> 20} MiB")
    return data.decode("utf-8", "replace")


def _stderr_warning(message: str) -> None:
    print(f"kvscope bench: warning: {message}", file=sys.stderr, flush=True)


def scrape_cause(err: BaseException) -> str:
    """A failed scrape's cause in a few words (what a person would check first)."""
    if isinstance(err, TimeoutError | asyncio.TimeoutError):
        return "timed out"
    if isinstance(err, aiohttp.ClientConnectorError):
        return (
            "connection refused"
            if isinstance(err.os_error, ConnectionRefusedError)
            else ("cannot connect")
        )
    if isinstance(err, _HTTPStatus):
        return f"HTTP {err.status}"
    return "not an HTTP metrics server"


class _HTTPStatus(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"http {status}")
        self.status = status


class ServerProbe:
    """Poll ``/metrics`` every ``interval_s`` and hand each row to ``sink``.

    A failure is said at once through ``warn`` (stderr by default), once per outage and
    cause, and so is a recovery and a page that carries no engine series at all: a bench
    whose server figures are missing must not look like one whose server was idle.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        interval_s: float,
        t0: float,
        sink: Callable[[dict[str, Any]], None],
        *,
        headers: dict[str, str] | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        if not 0.01 <= interval_s <= 60:
            raise ValueError("scrape interval must be within 0.01-60 s")
        self.session = session
        self.url = url
        self.headers = headers
        self.interval_s = interval_s
        self.t0 = t0
        self.sink = sink
        self.samples = 0
        self.failures = 0
        self.seen: set[str] = set()
        self.last_error = ""
        self.peaks: dict[str, float] = {}
        self.warn = warn or _stderr_warning
        self._down = ""  # cause of the outage now going on ("" while scrapes succeed)
        self._said_empty = False

    async def scrape_once(self) -> dict[str, Any]:
        clock = time.perf_counter
        start = clock()
        row: dict[str, Any] = {"t_s": start - self.t0, "scrape_ok": False}
        row.update(dict.fromkeys(COLUMNS, math.nan))
        try:
            timeout = aiohttp.ClientTimeout(total=max(self.interval_s * 4, 1.0))
            async with self.session.get(self.url, timeout=timeout, headers=self.headers) as resp:
                if resp.status != 200:
                    raise _HTTPStatus(resp.status)
                text = await _read_page(resp)
            values = parse_metrics(text)
            row.update(values)
            row["scrape_ok"] = True
            self._news("", values)
            self.seen.update(values)
            for k, v in values.items():
                self.peaks[k] = max(self.peaks.get(k, -math.inf), v)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a failed scrape is a row with scrape_ok false
            self.failures += 1
            # redacted: the text may quote the URL or what the server echoed
            self.last_error = (redact_text(f"{type(err).__name__}: {err}") or "")[:200]
            self._news(scrape_cause(err), {})
        row["scrape_latency_s"] = clock() - start
        self.samples += 1
        self.sink(row)
        return row

    def _news(self, cause: str, values: dict[str, float]) -> None:
        """Warn when scraping starts failing, changes cause, recovers or finds nothing."""
        where = redact_url(self.url)
        if cause and cause != self._down:
            again = "still " if self._down else ""
            self.warn(
                f"{again}cannot scrape {where} ({cause}); the server's figures "
                "(KV-cache usage, queue, preemptions) will be missing while it lasts"
            )
        elif not cause and self._down:
            self.warn(f"{where} answers again")
        self._down = cause
        if not cause and not values and not self._said_empty:
            self._said_empty = True
            self.warn(
                f"{where} answers but carries no vLLM, SGLang or llama.cpp series; "
                "the server's figures will be missing (llama.cpp needs --metrics)"
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Scrape on an absolute schedule until ``stop`` is set."""
        next_t = time.perf_counter()
        while not stop.is_set():
            await self.scrape_once()
            next_t += self.interval_s
            delay = next_t - time.perf_counter()
            if delay < 0:  # a slow scrape: skip missed slots rather than bursting
                next_t = time.perf_counter()
                delay = 0.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "url": redact_url(self.url),
            "interval_s": self.interval_s,
            "samples": self.samples,
            "failed_scrapes": self.failures,
            "metrics_found": sorted(self.seen),
        }
        if self.last_error:
            out["last_scrape_error"] = self.last_error
        for k, v in self.peaks.items():
            out[f"{k}_peak"] = v
        return out
