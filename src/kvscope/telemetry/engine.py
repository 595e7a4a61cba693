"""Engine scraper: fetch an engine's Prometheus ``/metrics`` page over time.

:mod:`kvscope.telemetry.metrics_page` reads one page; per scrape, :class:`EngineScraper`
emits :class:`~kvscope.telemetry.series.Sample` s in base units: gauges as they are,
counters as totals (``*_total``) and windowed rates (``*_per_second``), histograms as
windowed percentiles (``*_p50``/``_p90``/``_p99``), vLLM's ``cache_config_info`` as block size
and block count, and the KV capacity in tokens.
"""

from __future__ import annotations

import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kvscope.errors import KvscopeError
from kvscope.redact import basic_auth, redact_text, redact_url
from kvscope.telemetry.catalogue import BY_NAME, Kind
from kvscope.telemetry.llamacpp import slots_usage
from kvscope.telemetry.metrics_page import EnginePage, parse_page
from kvscope.telemetry.scrape_http import MAX_BODY, HttpGetter
from kvscope.telemetry.series import Sample
from kvscope.telemetry.windows import CounterWindow, HistogramWindow

#: Percentiles reported for every histogram (as ``<name>_p50`` ...).
QUANTILES = (0.5, 0.9, 0.99)
#: Timeout of the first scrape of an engine (s). A user who typed a wrong URL (a port that
#: accepts and never answers) must hear of it within 2 s of starting the command, start-up
#: included, not after the 2 s steady-state timeout. A /metrics page renders in tens of ms;
#: later scrapes wait the full ``timeout_s``, so a merely slow engine is told once ("timed
#: out", then "answers again") and read from then on.
FIRST_CONTACT_TIMEOUT_S = 0.5
_HTTP_STATUS = re.compile(r"\bHTTP (\d{3})\b")


def fault_cause(message: str) -> str:
    """The short cause of a failed scrape, from its one-line message.

    ``connection refused``, ``timed out``, ``HTTP 404``, ``not a metrics page``, ``host not
    found``, ``connection closed``, ``not an HTTP server``; else the message itself (without
    its ``cannot scrape URL:`` prefix). Warnings are told once per cause, not per scrape.
    """
    low = message.lower()
    status = _HTTP_STATUS.search(message)
    if "refused" in low:
        return "connection refused"
    if "timed out" in low or "timeout" in low:
        return "timed out"
    if status is not None:
        return f"HTTP {status.group(1)}"
    if "not a metrics page" in low or "no engine series" in low:
        return "not a metrics page"
    if "name or service not known" in low or "nodename nor servname" in low:
        return "host not found"
    if "getaddrinfo" in low or "name resolution" in low:
        return "host not found"
    if "bad status line" in low or "malformed prometheus" in low:
        return "not an HTTP metrics server"
    if "closed" in low or "reset" in low:
        return "connection closed"
    return message.partition(": ")[2] or message


def gauge_url(url: str, names: Iterable[str]) -> str:
    """``url`` with a ``name[]`` parameter per exposed name (prometheus_client's filter)."""
    query = urllib.parse.urlencode([("name[]", n) for n in sorted(names)])
    if not query:
        return url
    return f"{url}{'&' if '?' in url else '?'}{query}"


def metrics_url(url: str) -> str:
    """``http://host:port`` -> ``http://host:port/metrics``; a URL with a path is kept."""
    if "://" not in url:
        url = "http://" + url
    scheme, _, rest = url.partition("://")
    netloc, _, path = rest.partition("/")
    if not path:  # 'http://host:port' and 'http://host:port/' both mean the engine's base
        return f"{scheme}://{netloc}/metrics"
    return url


#: ``HOST:PORT`` typed without a scheme (``127.0.0.1:8000``, ``gpu-node-3:30000``, ``[::1]:80``).
_HOST_PORT = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]):\d{1,5}(?:[/?]\S*)?"
)
#: Host names a scrape can resolve without surprises (IDNA would raise on many others).
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?|[0-9A-Fa-f:.]+")


def engine_url(url: str, flag: str = "--engine") -> str:
    """Check a user's engine address and return its ``/metrics`` URL (one-line error if bad).

    Accepted: ``http(s)://HOST[:PORT][/path]`` and the shorthand ``HOST:PORT``. A bare word
    (``not-a-url``) is refused rather than scraped as ``http://not-a-url/metrics``.
    """
    text = url.strip()
    shown = redact_text(redact_url(text)) or ""
    hint = "Give http://HOST:PORT or HOST:PORT, e.g. http://127.0.0.1:8000."
    if not text or any(c.isspace() or ord(c) < 32 for c in text):
        raise KvscopeError(f"{flag} {shown!r} is not an engine URL.", hint)
    if "://" not in text:
        if not _HOST_PORT.fullmatch(text):
            raise KvscopeError(f"{flag} {shown!r} is not an engine URL.", hint)
        text = "http://" + text
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as err:
        raise KvscopeError(f"{flag} {shown!r} is not an engine URL ({err}).", hint) from None
    if parts.scheme.lower() not in ("http", "https"):
        raise KvscopeError(f"{flag} {shown!r}: scheme '{parts.scheme}' is not http or https.", hint)
    host = parts.hostname or ""
    if not _HOST.fullmatch(host):
        raise KvscopeError(f"{flag} {shown!r} names no valid host.", hint)
    if port == 0:
        raise KvscopeError(f"{flag} {shown!r}: port 0 cannot be scraped.", hint)
    return metrics_url(text)


def fetch_text(url: str, timeout_s: float = 2.0) -> str:
    """GET ``url`` once and return the body as text (raises KvscopeError when unreachable)."""
    try:
        clean, auth = basic_auth(url)
        req = urllib.request.Request(clean, headers={"Authorization": auth} if auth else {})
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            body: bytes = resp.read(MAX_BODY + 1)
    except (urllib.error.URLError, OSError, ValueError, UnicodeError) as err:
        raise KvscopeError(f"cannot scrape {redact_url(url)}: {redact_text(str(err))}") from err
    if len(body) > MAX_BODY:
        raise KvscopeError(f"cannot scrape {redact_url(url)}: body over {MAX_BODY:,} bytes")
    return body.decode("utf-8", errors="replace")


class KeepAliveFetcher:
    """Fetches URLs over persistent connections (one per ``host:port``).

    At 10 Hz a new TCP connection per scrape, or ``http.client``'s header parsing, costs
    more CPU than the scrape itself (see :mod:`kvscope.telemetry.scrape_http`); engines'
    servers (uvicorn for vLLM and SGLang, llama.cpp's httplib) keep connections alive.
    """

    def __init__(self) -> None:
        self._getters: dict[tuple[str, int, float, str | None], HttpGetter] = {}
        #: (url, timeout) -> (getter, path); None for URLs plain urllib fetches (https).
        #: Parsing a URL (and its credentials) once, not on every 10 Hz scrape.
        self._routes: dict[tuple[str, float], tuple[HttpGetter | None, str]] = {}

    def _route(self, url: str, timeout_s: float) -> tuple[HttpGetter | None, str]:
        try:
            clean, auth = basic_auth(url)
            parts = urllib.parse.urlsplit(clean)
            port = parts.port or 80
        except ValueError as err:
            raise KvscopeError(f"cannot scrape {redact_url(url)}: {err}") from err
        if parts.scheme != "http" or parts.hostname is None:
            return None, url  # https and the odd cases: plain urllib
        key = (parts.hostname, port, timeout_s, auth)
        getter = self._getters.get(key)
        if getter is None:
            getter = self._getters[key] = HttpGetter(key[0], key[1], timeout_s, auth)
        return getter, (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def __call__(self, url: str, timeout_s: float) -> str:
        route = self._routes.get((url, timeout_s))
        if route is None:
            if len(self._routes) > 256:  # gauge URLs change when an engine restarts
                self._routes.clear()
            route = self._routes[(url, timeout_s)] = self._route(url, timeout_s)
        getter, path = route
        if getter is None:
            return fetch_text(url, timeout_s)
        try:
            return getter.get(path).decode("utf-8", errors="replace")
        except KvscopeError as err:
            raise KvscopeError(redact_text(err.message) or err.message) from err

    def close(self) -> None:
        for g in self._getters.values():
            g.close()


@dataclass
class EngineScraper:
    """Scrapes one engine and keeps the windows that turn totals into rates and percentiles."""

    url: str
    window_s: float = 60.0
    timeout_s: float = 2.0
    fetch: Callable[[str, float], str] = field(default_factory=KeepAliveFetcher)
    source: str = ""
    #: Gauges (the KV waveform) are read on every tick; counters and histograms feed rates
    #: and percentiles over a window of tens of seconds (60 s by default), so reading them
    #: every 5 s is plenty — three times finer than Prometheus' default 15 s scrape interval
    #: (prometheus.io/docs/prometheus/latest/configuration/configuration) — and keeps 10 Hz
    #: sampling cheap: the maintained parser is pure Python and a vLLM page's histograms are
    #: most of its cost.
    cumulative_every_s: float = 5.0
    _last_full: float = -math.inf
    #: URL of the gauge-only scrapes: ``/metrics?name[]=...`` with the gauges the last full
    #: page had. Servers built on prometheus_client's ASGI/WSGI app (vLLM mounts it in
    #: vllm/entrypoints/serve/instrumentator/metrics.py) then render only those few series
    #: (``name[]`` selects a restricted registry), so a 10 Hz scrape moves hundreds of bytes
    #: instead of a 50 KB page and costs the engine's API server almost nothing. A server that
    #: ignores the query sends the whole page, which the gauge path reads the same way.
    _gauge_url: str = ""
    _gauges: frozenset[str] = frozenset()
    _filters: bool = True
    faults: int = 0
    #: Scrapes of the page that succeeded; ``up`` is the last one's outcome (None: not yet).
    ok_scrapes: int = 0
    up: bool | None = None
    last_error: str = ""
    #: :func:`fault_cause` of ``last_error`` ("" while the engine answers).
    last_cause: str = ""
    last_page: EnginePage | None = None
    _counters: dict[str, CounterWindow] = field(default_factory=dict)
    _hists: dict[str, HistogramWindow] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.url = metrics_url(self.url)
        if not self.source:
            # host:port only: user:password@ in the URL must never become a stored label.
            netloc = self.url.partition("://")[2].partition("/")[0].partition("?")[0]
            self.source = f"engine:{netloc.rpartition('@')[2]}"

    @property
    def display_url(self) -> str:
        """The URL as it may be stored, shown or served: no credentials."""
        return redact_url(self.url)

    def sample(self, t_s: float | None = None) -> list[Sample]:
        """Scrape once. An unreachable engine yields ``engine_up 0`` and a counted fault."""
        t = time.time() if t_s is None else t_s
        start = time.perf_counter()
        full = t - self._last_full >= self.cumulative_every_s
        timeout = self.timeout_s
        if self.ok_scrapes == 0 and self.faults == 0:
            timeout = min(timeout, FIRST_CONTACT_TIMEOUT_S)
        try:
            url = self.url if full else self._gauge_url
            page = parse_page(self.fetch(url, timeout), full=full)
            if full:
                _check_engine_page(page)
            if not full and not self._gauges <= page.values.keys():
                # A gauge went missing: read the whole page now. If it is there, the server
                # cannot filter (vLLM with several API servers renders a multiprocess
                # registry, which has no names to restrict to and sends an empty page): stop
                # asking it to. Otherwise the engine changed (a restart, a renamed gauge).
                full = True
                page = parse_page(self.fetch(self.url, self.timeout_s), full=True)
                if self._gauges <= page.values.keys():
                    self._filters = False
        except KvscopeError as err:
            self.faults += 1
            self.up = False
            self.last_error = redact_text(err.one_line()) or ""
            self.last_cause = fault_cause(self.last_error)
            return [Sample(t, self.source, "engine_up", 0.0)]
        self.up = True
        self.last_cause = ""
        self.ok_scrapes += 1
        if full:
            self._last_full = t
            self._gauges = frozenset(k for k in page.values if BY_NAME[k].kind is Kind.GAUGE)
            names = [page.resolved_from[k] for k in self._gauges] if self._filters else []
            self._gauge_url = gauge_url(self.url, names)
        self.last_page = page
        out = [Sample(t, self.source, "engine_up", 1.0)]
        out.extend(self._samples(t, page))
        if page.kind == "llamacpp" and "kv_cache_usage_ratio" not in page.values:
            out.extend(self._slots(t))
        dur = time.perf_counter() - start
        out.append(Sample(t, self.source, "engine_scrape_duration_seconds", dur))
        return out

    def news(self, was_up: bool | None, was_cause: str) -> str | None:
        """The line to tell after a scrape, given the state before it; None if nothing new.

        Once per outage and cause: a dead URL scraped at 10 Hz is one line, not ten a second;
        a new cause within an outage is a new line, and so is the answer that ends it.
        """
        if self.up is False and (was_up is not False or self.last_cause != was_cause):
            detail = self.last_error.partition(": ")[2] or self.last_error
            cause = self.last_cause
            why = detail if cause.lower() in detail.lower() else f"{cause}: {detail}"
            again = "still " if was_up is False else ""
            return f"engine {self.display_url} is {again}not answering ({why}); still trying."
        if self.up is True and was_up is False:
            return f"engine {self.display_url} answers again."
        return None

    def _slots(self, t: float) -> list[Sample]:
        # llama.cpp exports no KV gauge: derive it from /slots (see telemetry.llamacpp).
        url = self.url.rsplit("/", 1)[0] + "/slots"
        try:
            use = slots_usage(self.fetch(url, self.timeout_s))
        except KvscopeError as err:
            self.faults += 1
            self.last_error = redact_text(err.one_line()) or ""
            return []
        src = self.source
        return [
            Sample(t, src, "kv_cache_usage_ratio", use.usage_ratio),
            Sample(t, src, "kv_cache_used_tokens", float(use.used_tokens)),
            Sample(t, src, "kv_cache_capacity_tokens", float(use.capacity_tokens)),
        ]

    def _samples(self, t: float, page: EnginePage) -> Iterable[Sample]:
        src = self.source
        for name, value in page.values.items():
            entry = BY_NAME[name]
            if entry.kind is Kind.COUNTER:
                win = self._counters.setdefault(name, CounterWindow(self.window_s))
                win.add(t, value)
                yield Sample(t, src, f"{name}_total", value)
                rate = win.rate()
                if not math.isnan(rate):
                    yield Sample(t, src, f"{name}_per_second", rate)
            else:
                yield Sample(t, src, name, value)
        for name, snap in page.histograms.items():
            hw = self._hists.setdefault(name, HistogramWindow(self.window_s))
            hw.add(t, snap)
            for q in QUANTILES:
                v = hw.quantile(q)
                if not math.isnan(v):
                    yield Sample(t, src, f"{name}_p{round(q * 100)}", v)
        cfg = page.cache_config
        if cfg is not None:
            if cfg.block_size is not None:
                yield Sample(t, src, "kv_block_size_tokens", float(cfg.block_size))
            if cfg.num_gpu_blocks is not None:
                yield Sample(t, src, "kv_blocks_total", float(cfg.num_gpu_blocks))
            cap = cfg.capacity_tokens
            if cap is not None and "kv_cache_capacity_tokens" not in page.values:
                yield Sample(t, src, "kv_cache_capacity_tokens", float(cap))
                usage = page.values.get("kv_cache_usage_ratio")
                if usage is not None and "kv_cache_used_tokens" not in page.values:
                    yield Sample(t, src, "kv_cache_used_tokens", usage * cap)
        hits = self._counters.get("prefix_cache_hits_tokens")
        queries = self._counters.get("prefix_cache_queries_tokens")
        if hits is not None and queries is not None and queries.increase() > 0:
            yield Sample(t, src, "prefix_cache_hit_ratio", hits.increase() / queries.increase())
        if page.unmapped:
            yield Sample(t, src, "engine_unmapped_families", float(len(page.unmapped)))


def _check_engine_page(page: EnginePage) -> None:
    """Refuse a page that answers 200 but holds no engine series (an HTML page, a 200 from a
    proxy, another exporter): a watch of it would store nothing and look healthy."""
    if page.values or page.histograms or page.cache_config is not None or page.kind:
        return
    raise KvscopeError("not a metrics page of vLLM, SGLang or llama.cpp (no engine series on it)")
