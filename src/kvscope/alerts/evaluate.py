"""Deterministic rule evaluation over stored series, with Prometheus' alerting semantics.

At each evaluation time ``t`` (every ``pack.interval_s``) every rule computes its signal per
series with the PromQL-exact functions of :mod:`kvscope.alerts.promql`, compares it with the
threshold in force at ``t`` (:meth:`Rule.threshold_at`: holiday, then peak relaxation), and
runs Prometheus' alert state machine (``rules/alerting.go``): a series that matches becomes
*pending* at its first matching evaluation and *firing* once ``t - active_at >= for``; a series
that stops matching resolves. An escalated companion (``<Name>Escalated``, next tier) fires
after ``escalate_after`` consecutive firing evaluations, exactly as the chained Prometheus
rule over ``ALERTS{alertstate="firing"}`` with ``for: (N-1) x interval`` does.

:func:`replay` walks a stored history; :class:`LiveEvaluator` (and :func:`evaluate_live`) is
the same machine fed sample by sample, for the ``watch`` loop.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kvscope.alerts import promql
from kvscope.alerts.model import Kind, Rule, RulePack, Tier
from kvscope.alerts.signals import Signal, signal
from kvscope.errors import KvscopeError
from kvscope.telemetry.series import Sample, parse_label_string

#: Most evaluation steps one replay walks: ~19 years of a 1 min interval.
MAX_STEPS = 10_000_000

LabelSet = tuple[tuple[str, str], ...]
SeriesId = tuple[str, str, str]  # (metric, source, labels)


def prom_labels(source: str, labels: str) -> dict[str, str]:
    """Prometheus labels of a stored series, as kvscope's exporter renders them
    (``gpu:0`` -> ``gpu="0"``, ``engine:HOST:PORT`` -> ``engine="HOST:PORT"``)."""
    kind, _, ident = source.partition(":")
    out = {kind: ident} if kind in ("gpu", "engine") and ident else {"source": source}
    out.update(parse_label_string(labels))
    return out


class SeriesSet:
    """Samples per series, kept sorted by time (integer ms), appendable."""

    def __init__(self) -> None:
        self._t: dict[SeriesId, list[int]] = {}
        self._v: dict[SeriesId, list[float]] = {}
        self._arrays: dict[SeriesId, tuple[promql.IntArray, promql.FloatArray]] = {}

    def add(self, metric: str, source: str, labels: str, t_s: float, value: float) -> None:
        if math.isnan(value):
            return  # a missing reading is a gap, never a value (PromQL drops it too)
        key = (metric, source, labels)
        ts = self._t.setdefault(key, [])
        vs = self._v.setdefault(key, [])
        t = promql.to_ms(t_s)
        if ts and t <= ts[-1]:
            if t == ts[-1]:
                vs[-1] = value
                self._arrays.pop(key, None)
                return
            raise KvscopeError(f"samples of {metric} for {source} are out of time order.")
        ts.append(t)
        vs.append(value)
        self._arrays.pop(key, None)

    def put(
        self, metric: str, source: str, labels: str, ts_s: list[float], vs: list[float]
    ) -> None:
        """Set a whole series at once (times ascending; NaN values are dropped as gaps)."""
        t = np.round(np.asarray(ts_s, np.float64) * 1000.0).astype(np.int64)
        v = np.asarray(vs, np.float64)
        keep = ~np.isnan(v)
        t, v = t[keep], v[keep]
        if len(t) > 1 and not bool(np.all(np.diff(t) > 0)):
            # duplicate timestamps: keep the last value of each, as add() does
            last = np.append(np.diff(t) != 0, True)
            t, v = t[last], v[last]
        key = (metric, source, labels)
        self._t[key] = t.tolist()
        self._v[key] = v.tolist()
        self._arrays[key] = (t, v)

    def extend(self, samples: Iterable[Sample]) -> None:
        for s in sorted(samples, key=lambda s: s.t_s):
            self.add(s.metric, s.source, s.labels, s.t_s, s.value)

    def has(self, key: SeriesId) -> bool:
        return key in self._t

    def keys(self, metric: str) -> list[SeriesId]:
        return sorted(k for k in self._t if k[0] == metric)

    def arrays(self, key: SeriesId) -> tuple[promql.IntArray, promql.FloatArray]:
        arr = self._arrays.get(key)
        if arr is None:
            arr = (np.asarray(self._t[key], np.int64), np.asarray(self._v[key], np.float64))
            self._arrays[key] = arr
        return arr

    def span_s(self) -> tuple[float, float] | None:
        firsts = [ts[0] for ts in self._t.values() if ts]
        lasts = [ts[-1] for ts in self._t.values() if ts]
        if not firsts:
            return None
        return min(firsts) / 1000.0, max(lasts) / 1000.0

    def trim(self, before_s: float) -> None:
        """Drop samples older than ``before_s`` (live evaluation keeps a bounded history)."""
        cut = promql.to_ms(before_s)
        for key in list(self._t):
            ts = self._t[key]
            i = int(np.searchsorted(np.asarray(ts), cut, side="left"))
            if i:
                del ts[:i]
                del self._v[key][:i]
                self._arrays.pop(key, None)


def _series_value(rule: Rule, ts: Any, vs: Any, t: int) -> float | None:
    w = promql.to_ms(rule.window_s)
    if rule.kind is Kind.THRESHOLD:
        hit = promql.instant(ts, vs, t)
        return None if hit is None else hit[1]
    if rule.kind is Kind.RATE:
        r = promql.rate(ts, vs, t, w)
        return None if r is None else r * 60.0
    if rule.kind is Kind.SLOPE:
        d = promql.deriv(ts, vs, t, w)
        return None if d is None else d * 60.0
    if rule.kind is Kind.PERCENTILE:
        return promql.quantile_over_time(rule.quantile, ts, vs, t, w)
    hit = promql.instant(ts, vs, t)  # STALE: seconds since the newest sample
    return None if hit is None else (t - hit[0]) / 1000.0


def signal_values(rule: Rule, sig: Signal, data: SeriesSet, t_s: float) -> dict[LabelSet, float]:
    """The rule's expression value per alert label set at ``t_s`` (before the comparison)."""
    t = promql.to_ms(t_s)
    out: dict[LabelSet, float] = {}
    for key in data.keys(sig.store_metric):
        _, source, labels = key
        lab = prom_labels(source, labels)
        if sig.label_key is not None:
            if lab.get(sig.label_key) not in sig.label_values:
                continue
            lab.pop(sig.label_key)
        ts, vs = data.arrays(key)
        value = _series_value(rule, ts, vs, t)
        if value is None:
            continue
        if sig.store_denominator is not None:
            den_key = (sig.store_denominator, source, labels)
            if not data.has(den_key):
                continue
            hit = promql.instant(*data.arrays(den_key), t)
            if hit is None:
                continue
            value = value / hit[1] if hit[1] != 0 else (math.nan if value == 0 else math.inf)
        ls = tuple(sorted(lab.items()))
        out[ls] = max(out[ls], value) if ls in out else value  # max without (label_key)
    return out


@dataclass(frozen=True, slots=True)
class Event:
    """An alert changing state at Unix time ``t_s``."""

    t_s: float
    alertname: str
    rule: str
    tier: Tier
    state: str  # "firing" | "resolved"
    labels: LabelSet
    value: float
    threshold: float


@dataclass
class _Active:
    active_at: int
    firing: bool = False
    value: float = math.nan


@dataclass
class _Machine:
    """Prometheus' pending/firing state machine for one alertname."""

    alertname: str
    rule: str
    tier: Tier
    hold_ms: int
    active: dict[LabelSet, _Active] = field(default_factory=dict)

    def step(self, t: int, matches: Mapping[LabelSet, float], threshold: float) -> list[Event]:
        events: list[Event] = []
        for ls, value in matches.items():
            a = self.active.setdefault(ls, _Active(t))
            a.value = value
        for ls in [ls for ls in self.active if ls not in matches]:
            a = self.active.pop(ls)
            if a.firing:
                events.append(self._event(t, "resolved", ls, a.value, threshold))
        for ls, a in sorted(self.active.items()):
            if not a.firing and t - a.active_at >= self.hold_ms:
                a.firing = True
                events.append(self._event(t, "firing", ls, a.value, threshold))
        return events

    def _event(self, t: int, state: str, ls: LabelSet, value: float, thr: float) -> Event:
        return Event(t / 1000.0, self.alertname, self.rule, self.tier, state, ls, value, thr)

    def firing(self) -> list[LabelSet]:
        return sorted(ls for ls, a in self.active.items() if a.firing)


class Evaluator:
    """Evaluates a pack step by step; keeps alert state between steps."""

    def __init__(self, pack: RulePack) -> None:
        self.pack = pack
        self.signals = {r.name: signal(r.signal) for r in pack.rules}
        self.base: dict[str, _Machine] = {}
        self.escalated: dict[str, _Machine] = {}
        interval_ms = promql.to_ms(pack.interval_s)
        for r in pack.rules:
            self.base[r.name] = _Machine(r.name, r.name, r.tier, promql.to_ms(r.for_s))
            nxt = r.tier.next()
            if r.escalate_after is not None and nxt is not None:
                hold = (r.escalate_after - 1) * interval_ms
                self.escalated[r.name] = _Machine(r.escalated_name, r.name, nxt, hold)

    def step(self, data: SeriesSet, t_s: float) -> list[Event]:
        """Evaluate every rule at ``t_s``; returns the state changes, in rule order."""
        t = promql.to_ms(t_s)
        events: list[Event] = []
        for r in self.pack.rules:
            thr = r.threshold_at(t_s, self.pack.schedule)
            values = signal_values(r, self.signals[r.name], data, t_s)
            matches = {ls: v for ls, v in values.items() if promql.compare(v, r.op, thr)}
            events += self.base[r.name].step(t, matches, thr)
            esc = self.escalated.get(r.name)
            if esc is not None:
                fired = {ls: 1.0 for ls in self.base[r.name].firing()}
                events += esc.step(t, fired, float(r.escalate_after or 0))
        return events

    def firing(self) -> list[tuple[str, LabelSet]]:
        """(alertname, labels) of every alert firing after the last step."""
        out = [(m.alertname, ls) for m in self.base.values() for ls in m.firing()]
        out += [(m.alertname, ls) for m in self.escalated.values() for ls in m.firing()]
        return sorted(out)


@dataclass(frozen=True, slots=True)
class Replay:
    """Result of :func:`replay`: state changes, and the firing set per step when recorded."""

    start_s: float
    end_s: float
    steps: int
    events: tuple[Event, ...]
    firing: tuple[tuple[float, tuple[tuple[str, LabelSet], ...]], ...] = ()


def replay(
    pack: RulePack,
    data: SeriesSet,
    start_s: float | None = None,
    end_s: float | None = None,
    record_steps: bool = False,
) -> Replay:
    """Evaluate ``pack`` at every interval from ``start_s`` to ``end_s`` (defaults: the data's
    span, start aligned down to the interval). Deterministic for a given input."""
    span = data.span_s()
    if span is None:
        raise KvscopeError("no samples of any signal the rules use.")
    step = pack.interval_s
    first = math.floor((span[0] if start_s is None else start_s) / step) * step
    last = span[1] if end_s is None else end_s
    # Before the first sample nothing matches, and once the newest sample is older than the
    # longest window plus the 5 min lookback nothing can: steps out there change no state.
    # Skipping them keeps `--since -1e308` or `--until 1e308` from walking 1e306 steps;
    # the grid is whole multiples of the interval either way, so no step moves.
    first = max(first, math.floor(span[0] / step) * step)
    longest = max((r.window_s for r in pack.rules), default=0.0)
    last = min(last, span[1] + longest + promql.LOOKBACK_MS / 1000.0 + step)
    if (last - first) / step > MAX_STEPS:
        raise KvscopeError(
            f"replay would take {(last - first) / step:,.0f} evaluations (over {MAX_STEPS:,}).",
            "Narrow it with --since/--until, or use a longer interval in the rule file.",
        )
    ev = Evaluator(pack)
    events: list[Event] = []
    firing: list[tuple[float, tuple[tuple[str, LabelSet], ...]]] = []
    n = math.floor((last - first) / step + 1e-9) + 1
    for k in range(max(n, 0)):
        t = first + k * step
        events += ev.step(data, t)
        if record_steps:
            firing.append((t, tuple(ev.firing())))
    return Replay(first, first + (n - 1) * step, max(n, 0), tuple(events), tuple(firing))


def needed_metrics(pack: RulePack) -> tuple[str, ...]:
    """Store metrics the pack's rules read."""
    names = {m for r in pack.rules for m in signal(r.signal).store_metrics}
    return tuple(sorted(names))


def load_store(path: str, pack: RulePack, since_s: float = 0.0) -> SeriesSet:
    """Read the series the pack needs from a telemetry store (raw and downsampled rows).

    Rows from ``since_s`` minus the longest window (plus the 5 min lookback) are read, so the
    first evaluation at ``since_s`` sees full windows."""
    from kvscope.telemetry.store import Store

    margin = max((r.window_s for r in pack.rules), default=0.0) + promql.LOOKBACK_MS / 1000.0
    names = needed_metrics(pack)
    data = SeriesSet()
    start = since_s - margin if since_s > 0 else 0.0
    with Store(path, read_only=True) as st:
        marks = ",".join("?" for _ in names)
        keys = st.query(
            f"SELECT DISTINCT metric, source, labels FROM samples WHERE metric IN ({marks}) "
            "AND t_s >= ? ORDER BY metric, source, labels",
            [*names, start],
        )
        for metric, source, labels in keys:
            ts, vs = st.series(metric, source, labels, since_s=start)
            data.put(metric, source, labels, ts, vs)
    return data


class LiveEvaluator:
    """Evaluation fed as samples arrive (``watch``); keeps only the history windows need."""

    def __init__(self, pack: RulePack) -> None:
        self.pack = pack
        self.evaluator = Evaluator(pack)
        self.data = SeriesSet()
        self.metrics = set(needed_metrics(pack))
        self.horizon_s = max((r.window_s for r in pack.rules), default=0.0) + 600.0
        self.last_eval_s: float | None = None

    def observe(self, samples: Iterable[Sample]) -> None:
        self.data.extend(s for s in samples if s.metric in self.metrics)

    def due(self, t_s: float) -> bool:
        return self.last_eval_s is None or t_s - self.last_eval_s >= self.pack.interval_s - 1e-9

    def evaluate(self, t_s: float) -> list[Event]:
        self.last_eval_s = t_s
        events = self.evaluator.step(self.data, t_s)
        self.data.trim(t_s - self.horizon_s)
        return events


def evaluate_live(live: LiveEvaluator, samples: Iterable[Sample], t_s: float) -> list[Event]:
    """Feed one tick's samples; evaluate when an interval has passed. Returns state changes."""
    live.observe(samples)
    return live.evaluate(t_s) if live.due(t_s) else []
