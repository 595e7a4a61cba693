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

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from kvscope.errors import KvscopeError
from kvscope.telemetry.series import Sample, parse_label_string

PREFIX = "kvscope_"
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


class SampleCollector(Collector):
    """Renders a :class:`LatestValues` board as metric families at scrape time."""

    def __init__(self, board: LatestValues) -> None:
        self.board = board

    def collect(self) -> Iterator[Metric]:
        values, info = self.board.snapshot()
        families: dict[str, Any] = {}
        for (metric, source, labels), value in sorted(values.items()):
            base_names, base_values = _source_labels(source, info.get(source, {}))
            extra = parse_label_string(labels)
            names = list(base_names) + sorted(extra)
            lvalues = base_values + [extra[k] for k in sorted(extra)]
            is_counter = metric.endswith("_total")
            fname = PREFIX + (metric[: -len("_total")] if is_counter else metric)
            key = fname + "|" + ",".join(names)
            fam = families.get(key)
            if fam is None:
                cls = CounterMetricFamily if is_counter else GaugeMetricFamily
                fam = cls(fname, f"kvscope {metric}", labels=names)
                families[key] = fam
            fam.add_metric(lvalues, value)
        yield from families.values()


def make_registry(board: LatestValues) -> CollectorRegistry:
    """A fresh registry holding only the kvscope collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SampleCollector(board))
    return reg


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
        from prometheus_client import start_http_server

        try:
            server, thread = start_http_server(port, addr=host, registry=make_registry(board))
        except OSError as err:
            raise KvscopeError(f"cannot serve metrics on {host}:{port}: {err.strerror}.") from err
        return cls(board, host, int(server.server_address[1]), server, thread)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
