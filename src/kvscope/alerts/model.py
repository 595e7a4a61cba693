"""The rule model: tiered, schedule-aware alert rules as frozen records.

A :class:`Rule` watches one :mod:`signal <kvscope.alerts.signals>` through one expression
kind and fires after its condition has held for ``for_s`` seconds (Prometheus ``for:``
semantics). Kinds, all over a window of ``window_s`` seconds where they need one:

- ``threshold``  -- the latest value (Prometheus instant selector, 5 min lookback);
- ``rate``       -- per-minute rate of a counter (PromQL ``rate()`` x 60);
- ``percentile`` -- ``quantile`` of the values in the window (PromQL ``quantile_over_time``);
- ``slope``      -- least-squares slope per minute (PromQL ``deriv()`` x 60);
- ``stale``      -- seconds since the newest sample (PromQL ``time() - timestamp()``).

Tiers follow common on-call practice: ``warning`` (log, look within a day),
``alert`` (notify, respond within 5 min), ``critical`` (act now). A rule escalates to the next
tier after ``escalate_after`` consecutive firing evaluations; thresholds are relaxed by
``peak_relax`` (fraction, e.g. 0.2 = +20 %) inside declared peak windows and replaced by
``holiday_threshold`` on the pack's holiday dates. All times are UTC, as PromQL's ``hour()``
and ``day_of_week()`` are.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum


class Tier(StrEnum):
    """Urgency of an alert, in escalation order."""

    WARNING = "warning"
    ALERT = "alert"
    CRITICAL = "critical"

    def next(self) -> Tier | None:
        order = list(Tier)
        i = order.index(self)
        return order[i + 1] if i + 1 < len(order) else None


class Kind(StrEnum):
    """How a rule turns a signal's samples into one value per series."""

    THRESHOLD = "threshold"
    RATE = "rate"
    PERCENTILE = "percentile"
    SLOPE = "slope"
    STALE = "stale"


#: Comparison operators a rule may use (PromQL filter comparisons).
OPS = (">", ">=", "<", "<=", "==", "!=")


@dataclass(frozen=True, slots=True)
class Action:
    """What to do when an alert fires: ``log`` a line, POST JSON to ``url``, or run ``command``."""

    kind: str  # "log" | "webhook" | "command"
    url: str = ""
    command: tuple[str, ...] = ()
    timeout_s: float = 5.0


@dataclass(frozen=True, slots=True)
class TierPolicy:
    """Response time (seconds) and actions of one tier."""

    tier: Tier
    response_s: float
    actions: tuple[Action, ...]


@dataclass(frozen=True, slots=True)
class PeakWindow:
    """A weekly window, UTC: ISO weekdays (1 = Monday .. 7 = Sunday), hours [start, end)."""

    days: tuple[int, ...]
    start_hour: int
    end_hour: int

    def contains(self, t: dt.datetime) -> bool:
        return t.isoweekday() in self.days and self.start_hour <= t.hour < self.end_hour


@dataclass(frozen=True, slots=True)
class Schedule:
    """Peak windows and holiday dates shared by the rules of a pack."""

    peak_windows: tuple[PeakWindow, ...] = ()
    holidays: tuple[dt.date, ...] = ()

    def in_peak(self, t_s: float) -> bool:
        t = dt.datetime.fromtimestamp(t_s, dt.UTC)
        return any(w.contains(t) for w in self.peak_windows)

    def is_holiday(self, t_s: float) -> bool:
        return dt.datetime.fromtimestamp(t_s, dt.UTC).date() in self.holidays


@dataclass(frozen=True, slots=True)
class Rule:
    """One alert rule. Durations in seconds; ``threshold`` in the signal's unit (per minute
    for ``rate`` and ``slope``, seconds for ``stale``)."""

    name: str
    signal: str
    kind: Kind
    op: str
    threshold: float
    for_s: float
    tier: Tier
    why: str
    summary: str
    window_s: float = 300.0
    quantile: float = 0.5
    escalate_after: int | None = None
    peak_relax: float | None = None
    holiday_threshold: float | None = None
    match: tuple[tuple[str, str], ...] = ()

    @property
    def escalated_name(self) -> str:
        return self.name + "Escalated"

    def threshold_at(self, t_s: float, schedule: Schedule) -> float:
        """The threshold in force at Unix time ``t_s`` (holiday, then peak relaxation)."""
        base = self.threshold
        if self.holiday_threshold is not None and schedule.is_holiday(t_s):
            base = self.holiday_threshold
        if self.peak_relax is not None and schedule.in_peak(t_s):
            base = relaxed(base, self.op, self.peak_relax)
        return base


def relaxed(threshold: float, op: str, relax: float) -> float:
    """Threshold moved by ``relax`` (fraction) in the direction that fires less."""
    return threshold * (1.0 + relax) if op in (">", ">=") else threshold * (1.0 - relax)


@dataclass(frozen=True, slots=True)
class RulePack:
    """Rules, tier policies and the schedule; ``interval_s`` is the evaluation interval."""

    rules: tuple[Rule, ...]
    tiers: tuple[TierPolicy, ...]
    schedule: Schedule
    interval_s: float = 60.0
    source: str = "<pack>"

    def policy(self, tier: Tier) -> TierPolicy:
        for p in self.tiers:
            if p.tier is tier:
                return p
        return TierPolicy(tier, DEFAULT_RESPONSE_S[tier], (Action("log"),))

    def rule(self, name: str) -> Rule:
        for r in self.rules:
            if r.name == name:
                return r
        from kvscope.errors import UnknownNameError

        raise UnknownNameError("rule", name, [r.name for r in self.rules])


#: Default response times per tier (on-call practice: warning -> log and look within a
#: working day, alert -> notify within 5 min, critical -> act now).
DEFAULT_RESPONSE_S = {Tier.WARNING: 86400.0, Tier.ALERT: 300.0, Tier.CRITICAL: 0.0}


def parse_duration(text: str) -> float:
    """Prometheus duration ('90s', '5m', '1h30m', '2d') -> seconds; ValueError if malformed."""
    import re

    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
    text = text.strip()
    parts = re.findall(r"(\d+)(ms|s|m|h|d|w)", text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"'{text}' is not a duration like 30s, 5m or 1h30m")
    return sum(int(n) * units[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """Seconds -> the shortest Prometheus duration ('0s', '90s' -> '1m30s')."""
    s = round(seconds)
    if s == 0:
        return "0s"
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            out += f"{s // size}{unit}"
            s %= size
    return out
