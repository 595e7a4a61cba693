"""Live KV-event figures for watch: rates, residency, eviction churn, lost and bad messages.

Series (source ``kv-events:ENDPOINT``, one sample per watch tick): counters
``kv_events_blocks_stored_total``, ``kv_events_blocks_removed_total``,
``kv_events_lost_batches_total``, ``kv_events_malformed_total``,
``kv_events_publisher_restarts_total``, ``kv_events_eviction_churn_total`` (blocks stored
again within ``churn_window_s`` seconds of their removal: the pool is too small for the
reuse it sees), and gauges ``kv_events_resident_blocks`` (stored minus removed hashes) and
``kv_events_residency_p50_seconds`` (stored→removed time of the blocks removed so far).
The end summary adds the miss-ratio curve over the stored capture (workload/kv_reuse).
"""

from __future__ import annotations

import bisect
import math
import threading
from typing import Any

from kvscope.telemetry.kv_events.subscriber import KvEventSubscriber, Rows
from kvscope.telemetry.kv_events.table import KvEventTable, read_rows
from kvscope.telemetry.series import Sample

#: Residency times kept for percentiles (the newest; older ones are dropped).
RESIDENCY_KEEP = 100_000


class KvEventsLive:
    """Subscribers for each endpoint, their table in the store, and the live figures."""

    def __init__(
        self,
        endpoints: tuple[str, ...],
        topic: str = "",
        replay: tuple[str, ...] = (),
        churn_window_s: float = 60.0,
        on_warning: Any = None,
    ) -> None:
        self.endpoints = endpoints
        self.topic = topic
        self.replay = replay
        self.churn_window_s = churn_window_s
        self.on_warning = on_warning
        self.table: KvEventTable | None = None
        self.subs: list[KvEventSubscriber] = []
        self._lock = threading.Lock()
        self._stored_at: dict[str, float] = {}
        self._removed_at: dict[str, float] = {}
        self.residency_s: list[float] = []
        self.churn = 0
        self.store_path: Any = None

    def open(self, store: Any, flush_s: float) -> None:
        if store is not None:
            self.table = KvEventTable(store._con, flush_s=flush_s).start()
            self.store_path = store.path
        for i, ep in enumerate(self.endpoints):
            rep = self.replay[i] if i < len(self.replay) else None
            s = KvEventSubscriber(
                ep, self.put, topic=self.topic, replay_endpoint=rep, on_warning=self.on_warning
            )
            s.start()
            self.subs.append(s)
        for s in self.subs:
            s.ready.wait(5)

    def put(self, rows: Rows) -> None:
        if self.table is not None:
            self.table.put(rows)
        with self._lock:
            stored, removed, keep = self._stored_at, self._removed_at, self.residency_s
            for t, kind, h in zip(rows["t_s"], rows["kind"], rows["block_hash"], strict=True):
                if kind == "stored":
                    gone = removed.pop(h, None)
                    if gone is not None and t - gone <= self.churn_window_s:
                        self.churn += 1
                    stored[h] = t
                elif kind == "removed":
                    born = stored.pop(h, None)
                    if born is not None:
                        keep.append(t - born)
                    removed[h] = t
                else:
                    stored.clear()
            if len(keep) > 2 * RESIDENCY_KEEP:
                del keep[:-RESIDENCY_KEEP]

    def sample(self, t_s: float) -> list[Sample]:
        out: list[Sample] = []
        for s in self.subs:
            src, c = f"kv-events:{s.endpoint}", s.counts
            for name, v in (
                ("kv_events_blocks_stored_total", c.blocks_stored),
                ("kv_events_blocks_removed_total", c.blocks_removed),
                ("kv_events_lost_batches_total", c.lost),
                ("kv_events_malformed_total", c.malformed),
                ("kv_events_publisher_restarts_total", c.restarts),
            ):
                out.append(Sample(t_s, src, name, float(v)))
        with self._lock:
            out.append(
                Sample(t_s, "kv-events", "kv_events_eviction_churn_total", float(self.churn))
            )
            out.append(
                Sample(t_s, "kv-events", "kv_events_resident_blocks", float(len(self._stored_at)))
            )
            p50 = _quantile(self.residency_s, 0.5)
        if not math.isnan(p50):
            out.append(Sample(t_s, "kv-events", "kv_events_residency_p50_seconds", p50))
        return out

    def close(self) -> dict[str, Any]:
        for s in self.subs:
            s.close()
        if self.table is not None:
            self.table.stop()
        try:
            return self.summary()
        finally:
            if self.table is not None:
                self.table.close()

    def summary(self) -> dict[str, Any]:
        per = {
            s.endpoint: {
                k: getattr(s.counts, k)
                for k in (
                    "batches",
                    "events",
                    "blocks_stored",
                    "blocks_removed",
                    "cleared",
                    "gaps",
                    "lost",
                    "replayed",
                    "restarts",
                    "malformed",
                )
            }
            for s in self.subs
        }
        res = sorted(self.residency_s)
        out: dict[str, Any] = {
            "endpoints": per,
            "eviction_churn_blocks": self.churn,
            "residency_s": {
                q: _quantile(res, p, True)
                for q, p in (("p10", 0.1), ("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
            },
            "residency_cdf_s": cdf_points(res),
        }
        if self.table is not None and self.table.rows_written:
            out["reuse"] = reuse_summary(self._rows())
        return out

    def _rows(self) -> list[tuple[Any, ...]]:
        # read through the table's own cursor: the store is still open for writing
        assert self.table is not None
        return [
            tuple(r)
            for r in self.table._con.execute("SELECT * FROM kv_events ORDER BY rowid").fetchall()
        ]


def reuse_summary(rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    """Engine hit rate, reuse distances and the miss-ratio curve of a capture's rows."""
    from kvscope.workload.kv_reuse.reconstruct import chains, engine_hit_rate
    from kvscope.workload.kv_reuse.routing import routed_hit_rate
    from kvscope.workload.kv_reuse.stack import miss_ratio_curve

    reqs = chains(rows)
    mrc = miss_ratio_curve(reqs)
    # The pool's size as the stream shows it: the most hashes resident at once.
    live: set[Any] = set()
    peak = 0
    for r in rows:
        if r[3] == "stored":
            live.add(r[4])
        elif r[3] == "removed":
            live.discard(r[4])
        else:
            live.clear()
        peak = max(peak, len(live))
    finite = sorted(d for d in mrc.distances if not math.isinf(d))
    curve = {f"{k:g}x": mrc.hit_rate(max(1, round(k * peak)))[0] for k in (0.25, 0.5, 1, 2, 4, 8)}
    return {
        "requests": len(reqs),
        "engine_hit_rate": engine_hit_rate(reqs),
        "pool_blocks_seen": peak,
        "reuse_distance_blocks": {
            "p50": _quantile(finite, 0.5, True),
            "p90": _quantile(finite, 0.9, True),
        },
        "miss_ratio_curve": curve,
        "reuse_distance_cdf_blocks": cdf_points(finite, len(mrc.distances)),
        "miss_ratio_curve_blocks": [
            [c, bisect.bisect_left(finite, c) / len(mrc.distances)]
            for c in _capacities(max(peak, 1), finite)
        ]
        if mrc.distances
        else [],
        "with_cpu_tier_1x": mrc.hit_rate(peak, peak)[1] if peak else math.nan,
        "replicas_4": {
            p: routed_hit_rate(reqs, 4, p, max(1, peak // 4)) for p in ("round-robin", "prefix")
        }
        if peak >= 4
        else {},
    }


def cdf_points(xs: list[float], of: int | None = None, n: int = 41) -> list[list[float]]:
    """``[value, % of all at or below]`` at ``n`` evenly spaced quantiles of sorted ``xs``;
    ``of`` (>= len) counts values left out (first touches: no reuse distance)."""
    if not xs:
        return []
    total = of or len(xs)
    out = []
    for i in range(n):
        k = min(len(xs) - 1, round(i * (len(xs) - 1) / (n - 1)))
        out.append([float(xs[k]), 100.0 * (k + 1) / total])
    return out


def _capacities(peak: int, finite: list[float], n: int = 32) -> list[int]:
    """Pool sizes (blocks) for the curve: log-spaced from 1 to past the longest distance."""
    top = max(8 * peak, int(finite[-1]) + 2 if finite else 1)
    return sorted({max(1, round(top ** (i / (n - 1)))) for i in range(n)} | {peak})


def _quantile(xs: list[float], q: float, is_sorted: bool = False) -> float:
    if not xs:
        return math.nan
    s = xs if is_sorted else sorted(xs)
    return float(s[min(len(s) - 1, int(q * len(s)))])


__all__ = ["KvEventsLive", "read_rows", "reuse_summary"]
