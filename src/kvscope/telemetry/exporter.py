"""Prometheus exporter: the latest value of every series, rendered at scrape time.

A :class:`LatestValues` board keeps the newest sample per series (written by the sampling
loop, read by scrapes, one lock). :class:`SampleCollector` is a ``prometheus_client``
custom collector registered on its *own* ``CollectorRegistry`` (no process/GC metrics mixed
in), so each scrape renders exactly what was sampled. Names are ``kvscope_<metric>`` in base
units (Prometheus naming practice: seconds, bytes, ratios, ``_total`` for counters).

Labels are consistent per family: GPU series carry ``gpu``, ``uuid`` and ``name``; engine
series carry ``engine``, ``kind`` and ``model``; per-series extras (``pid``, ``reason``) are
appended. The HTTP server binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from kvscope.errors import KvscopeError
from kvscope.redact import redact_text
from kvscope.telemetry.series import Sample, parse_label_string
from kvscope.validate import count

PREFIX = "kvscope_"
#: A bind address: an IPv4/IPv6 literal or a host name (``localhost``, ``node-3.lan``).
_LISTEN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?|[0-9A-Fa-f:.]+")


def listen_address(host: str) -> str:
    """Check an exporter bind address (one-line error for a URL, a path or an empty string)."""
    if not _LISTEN.fullmatch(host or ""):
        shown = redact_text(host) or ""
        raise KvscopeError(
            f"--listen {shown[:60]!r} is not an address to serve on.",
            "Give an IP address or host name: 127.0.0.1 (this machine) or 0.0.0.0 (all).",
        )
    return host


_BASE_LABELS = {"gpu": ("gpu", "uuid", "name"), "engine": ("engine", "kind", "model")}


@dataclass
class LatestValues:
    """Newest value per (metric, source, labels); thread-safe."""

    _values: dict[tuple[str, str, str], float] = field(default_factory=dict)
    _info: dict[str, dict[str, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, samples: Iterable[Sample]) -> None:
        with self._lock:
            for s in samples:
                self._values[(s.metric, s.source, s.labels)] = s.value

    def set_info(self, source: str, info: Mapping[str, str]) -> None:
        """Identity labels of a source (GPU ``uuid``/``name``, engine ``kind``/``model``)."""
        with self._lock:
            self._info[source] = dict(info)

    def snapshot(self) -> tuple[dict[tuple[str, str, str], float], dict[str, dict[str, str]]]:
        with self._lock:
            return dict(self._values), {k: dict(v) for k, v in self._info.items()}


def _source_labels(source: str, info: Mapping[str, str]) -> tuple[tuple[str, ...], list[str]]:
    kind, _, ident = source.partition(":")
    names = _BASE_LABELS.get(kind)
    if names is None:
        return ("source",), [source]
    values = [ident] + [info.get(n, "") for n in names[1:]]
    return names, values


@dataclass(frozen=True, slots=True)
class _Series:
    family: str  # kvscope_<metric> without _total
    is_counter: bool
    doc: str
    label_names: tuple[str, ...]
    label_values: tuple[str, ...]
    line_prefix: str  # 'name{labels} ' exactly as the text exposition writes it


def _escape(value: str) -> str:
    # Text exposition format: backslash, double quote and line feed are escaped in label values.
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _series(metric: str, source: str, labels: str, info: Mapping[str, str]) -> _Series:
    base_names, base_values = _source_labels(source, info)
    extra = parse_label_string(labels)
    names = (*base_names, *sorted(extra))
    values = (*base_values, *(extra[k] for k in sorted(extra)))
    is_counter = metric.endswith("_total")
    family = PREFIX + (metric[: -len("_total")] if is_counter else metric)
    sample = family + "_total" if is_counter else family
    pairs = sorted(zip(names, values, strict=True))
    label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    prefix = f"{sample}{{{label_text}}} " if pairs else f"{sample} "
    return _Series(family, is_counter, f"kvscope {metric}", names, values, prefix)


class _Plan:
    """Series grouped into families in a stable order; label work is cached per series."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str, str], _Series] = {}
        self._info: dict[str, dict[str, str]] = {}

    def families(
        self, values: dict[tuple[str, str, str], float], info: dict[str, dict[str, str]]
    ) -> dict[tuple[str, tuple[str, ...]], list[tuple[_Series, float]]]:
        if info != self._info:
            self._cache.clear()  # identity labels changed: rebuild every label string
            self._info = info
        out: dict[tuple[str, tuple[str, ...]], list[tuple[_Series, float]]] = {}
        cache = self._cache
        for key in sorted(values):
            ser = cache.get(key)
            if ser is None:
                ser = _series(key[0], key[1], key[2], info.get(key[1], {}))
                cache[key] = ser
            out.setdefault((ser.family, ser.label_names), []).append((ser, values[key]))
        return out


class SampleCollector(Collector):
    """Renders a :class:`LatestValues` board as metric families at scrape time."""

    def __init__(self, board: LatestValues) -> None:
        self.board = board
        self._plan = _Plan()

    def collect(self) -> Iterator[Metric]:
        values, info = self.board.snapshot()
        for (family, names), rows in self._plan.families(values, info).items():
            first = rows[0][0]
            cls = CounterMetricFamily if first.is_counter else GaugeMetricFamily
            fam = cls(family, first.doc, labels=list(names))
            for ser, value in rows:
                fam.add_metric(list(ser.label_values), value)
            yield fam


def _go_float(value: float) -> str:
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]
    return text


def render_text(board: LatestValues, plan: _Plan | None = None) -> bytes:
    """The text exposition (format 0.0.4) of the board, byte for byte what
    ``prometheus_client.generate_latest`` makes of :class:`SampleCollector` (a test pins
    this), but with label strings cached per series: a 2,000-series scrape stays cheap."""
    values, info = board.snapshot()
    out: list[str] = []
    for (family, _names), rows in (plan or _Plan()).families(values, info).items():
        first = rows[0][0]
        name = family + "_total" if first.is_counter else family
        kind = "counter" if first.is_counter else "gauge"
        out.append(f"# HELP {name} {first.doc}\n# TYPE {name} {kind}\n")
        out.extend(f"{ser.line_prefix}{_go_float(value)}\n" for ser, value in rows)
    return "".join(out).encode()


def make_registry(board: LatestValues) -> CollectorRegistry:
    """A fresh registry holding only the kvscope collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SampleCollector(board))
    return reg


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Exporter:
    """A running ``/metrics`` HTTP server; :meth:`stop` shuts it down."""

    board: LatestValues
    host: str
    port: int
    _server: Any = None
    _thread: Any = None

    @classmethod
    def start(cls, board: LatestValues, port: int, host: str = "127.0.0.1") -> Exporter:
        """Serve ``/metrics`` from a daemon thread (port 0 picks a free port).

        A port outside 0-65535, one already in use or a host that does not resolve is one
        :class:`KvscopeError` line, raised before anything is sampled.
        """
        port = count(port, "--exporter-port", low=0, high=65535)
        plan = _Plan()

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            if environ.get("PATH_INFO", "/") not in ("/metrics", "/"):
                start_response("404 Not Found", [("Content-Type", "text/plain")])
                return [b"not found: try /metrics\n"]
            body = render_text(board, plan)
            start_response("200 OK", [("Content-Type", CONTENT_TYPE_PLAIN_0_0_4)])
            return [body]

        try:
            server = make_server(
                host, port, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler
            )
        except (OSError, OverflowError, ValueError, UnicodeError) as err:
            # OSError: in use, not permitted, unknown host; the others: a host name the
            # resolver cannot even encode (an embedded NUL, a label IDNA refuses).
            why = getattr(err, "strerror", None) or str(err) or type(err).__name__
            raise KvscopeError(
                redact_text(f"cannot serve metrics on {host}:{port}: {why}.") or "", None
            ) from None
        thread = threading.Thread(target=server.serve_forever, name="kvscope-exporter", daemon=True)
        thread.start()
        return cls(board, host, int(server.server_address[1]), server, thread)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
