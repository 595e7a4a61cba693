"""Rule files: YAML read through pydantic at the boundary, returned as frozen records.

A file holds ``interval`` (evaluation interval, default ``1m``), ``tiers`` (response time and
actions per tier), ``schedule`` (``peak_windows`` and ``holidays``) and ``rules``. Every error
names the file, the rule and the field at fault in one line, for example::

    rules.yaml: rule 'KvCacheNearFull': field 'threshold' must be a finite number, not nan.

Numbers must be YAML numbers and finite (``.nan`` would export as ``> nan`` and never fire),
durations non-negative and at most a year; the file is read as UTF-8 and a YAML alias
"bomb" (a few lines that expand to billions of nodes) is refused before it is expanded.
"""

from __future__ import annotations

import datetime as dt
import math
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from kvscope.alerts.model import (
    DEFAULT_RESPONSE_S,
    OPS,
    Action,
    Kind,
    PeakWindow,
    Rule,
    RulePack,
    Schedule,
    Tier,
    TierPolicy,
    parse_duration,
)
from kvscope.alerts.signals import BY_SIGNAL
from kvscope.errors import ConfigError, KvscopeError
from kvscope.redact import redact_url
from kvscope.validate import parse_yaml, read_text

DAYS = {"mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6, "sun": 7}
#: Longest duration a rule file may give (``for``, ``window``, ``interval``, ``response``).
MAX_DURATION_S = 366 * 86400.0
#: Shortest evaluation interval: Prometheus' own default is 1m, and a replay walks every step.
MIN_INTERVAL_S = 1.0
#: Nodes a rule file may expand to once YAML aliases are followed (the default pack has ~600).


def _duration(v: Any) -> float:
    if isinstance(v, int | float) and not isinstance(v, bool):
        if not math.isfinite(v):
            raise ValueError(f"must be a finite duration, not {v}")
        seconds = float(v)
    elif isinstance(v, str):
        seconds = parse_duration(v)
    else:
        raise ValueError("must be a duration like 30s, 5m or 1h30m")
    if seconds < 0:
        raise ValueError("must not be negative")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"must be at most 366d, not {v}")
    return seconds


def _number(v: Any) -> float:
    """A YAML number that is finite: no quoted strings, booleans, ``.nan`` or ``.inf``."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise PydanticCustomError("number", "must be a valid number, not {v}", {"v": repr(v)})
    if not math.isfinite(v):
        raise PydanticCustomError("finite", "must be a finite number, not {v}", {"v": str(v)})
    return float(v)


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, populate_by_name=True
    )


class ActionIn(_Strict):
    log: bool | None = None
    webhook: str | None = None
    command: list[str] | None = None
    timeout: float = Field(5.0, gt=0, le=3600)

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> float:
        return _number(v)

    def build(self) -> Action:
        chosen = [k for k in ("log", "webhook", "command") if getattr(self, k)]
        if len(chosen) != 1:
            raise ValueError("give exactly one of log, webhook, command")
        if self.webhook is not None:
            if not self.webhook.startswith(("http://", "https://")):
                raise ValueError("webhook must be an http:// or https:// URL")
            redact_url(self.webhook)  # registers a password in it: failures never print it
            return Action("webhook", url=self.webhook, timeout_s=self.timeout)
        if self.command is not None:
            return Action("command", command=tuple(self.command), timeout_s=self.timeout)
        return Action("log")


class TierIn(_Strict):
    response: str | float
    actions: list[ActionIn] = Field(default_factory=lambda: [ActionIn(log=True, timeout=5.0)])


class PeakIn(_Strict):
    days: list[Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]]
    start: int = Field(ge=0, le=23)
    end: int = Field(ge=1, le=24)


class ScheduleIn(_Strict):
    peak_windows: list[PeakIn] = Field(default_factory=list)
    holidays: list[dt.date] = Field(default_factory=list)


class RuleIn(_Strict):
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    signal: str
    kind: Kind
    op: str = ">"
    threshold: float
    window: str | float = "5m"
    quantile: float = Field(0.5, ge=0.0, le=1.0)
    for_: str | float = Field("0s", alias="for")
    tier: Tier
    why: str = Field(min_length=1)
    summary: str = ""
    escalate_after: int | None = Field(None, ge=1, le=1_000_000)
    peak_relax: float | None = Field(None, gt=0.0, le=10.0)
    holiday_threshold: float | None = None

    @field_validator("threshold", "quantile", "peak_relax", "holiday_threshold", mode="before")
    @classmethod
    def _finite(cls, v: Any) -> Any:
        return v if v is None else _number(v)

    @field_validator("signal")
    @classmethod
    def _known_signal(cls, v: str) -> str:
        if v not in BY_SIGNAL:
            raise ValueError(f"unknown signal '{v}' (known: {', '.join(sorted(BY_SIGNAL))})")
        return v

    @field_validator("op")
    @classmethod
    def _op(cls, v: str) -> str:
        if v not in OPS:
            raise ValueError(f"must be one of {' '.join(OPS)}")
        return v

    @field_validator("window", "for_")
    @classmethod
    def _dur(cls, v: str | float) -> float:
        return _duration(v)


class PackIn(_Strict):
    interval: str | float = "1m"
    tiers: dict[Tier, TierIn] = Field(default_factory=dict)
    schedule: ScheduleIn = Field(default_factory=ScheduleIn)
    rules: list[dict[str, Any]]


def _first_error(err: ValidationError) -> tuple[str, str]:
    e = err.errors()[0]
    loc = ".".join(str(p) for p in e["loc"]) or "<file>"
    msg = str(e["msg"]).removeprefix("Value error, ").rstrip(".")
    return loc.replace("for_", "for"), msg


def _rule(raw: Any, index: int, source: str) -> Rule:
    name = raw.get("name") if isinstance(raw, dict) else None
    where = f"{source}: rule '{name}'" if isinstance(name, str) else f"{source}: rules[{index}]"
    if not isinstance(raw, dict):
        raise ConfigError(where, "<rule>", "must be a mapping")
    try:
        r = RuleIn.model_validate(raw)
    except ValidationError as err:
        loc, msg = _first_error(err)
        raise ConfigError(where, loc, msg) from None
    kind = r.kind
    sig = BY_SIGNAL[r.signal]
    window = float(r.window)
    for_s = float(r.for_)
    if kind in (Kind.RATE,) and not sig.counter:
        raise ConfigError(where, "kind", f"'rate' needs a counter signal; '{sig.name}' is a gauge")
    if kind in (Kind.THRESHOLD, Kind.PERCENTILE, Kind.SLOPE) and sig.counter:
        raise ConfigError(where, "kind", f"'{kind}' needs a gauge signal; use 'rate'")
    if kind in (Kind.PERCENTILE, Kind.SLOPE) and sig.store_denominator is not None:
        raise ConfigError(where, "signal", f"'{sig.name}' is a ratio; use kind 'threshold'")
    if kind in (Kind.RATE, Kind.PERCENTILE, Kind.SLOPE) and window <= 0:
        raise ConfigError(where, "window", "must be positive")
    if r.escalate_after is not None and r.tier.next() is None:
        raise ConfigError(where, "escalate_after", "cannot escalate a critical rule")
    if r.peak_relax is not None and r.op in ("==", "!="):
        raise ConfigError(where, "peak_relax", f"cannot relax an '{r.op}' comparison")
    return Rule(
        name=r.name,
        signal=r.signal,
        kind=kind,
        op=r.op,
        threshold=r.threshold,
        for_s=for_s,
        tier=r.tier,
        why=" ".join(r.why.split()),
        summary=r.summary or f"{r.signal} {kind} {r.op} {r.threshold:g}",
        window_s=window,
        quantile=r.quantile,
        escalate_after=r.escalate_after,
        peak_relax=r.peak_relax,
        holiday_threshold=r.holiday_threshold,
    )


def safe_yaml(text: str, source: str) -> Any:
    """YAML text parsed by the one validation layer (alias bombs, syntax, depth: one line)."""
    return parse_yaml(text, source)


def load_pack_text(text: str, source: str = "<rules>") -> RulePack:
    """Parse a rule file's YAML text (KvscopeError/ConfigError on any fault)."""
    data = safe_yaml(text, source)
    if not isinstance(data, dict):
        raise ConfigError(source, "<file>", "must be a mapping with a 'rules' list")
    try:
        pack = PackIn.model_validate(data)
    except ValidationError as err:
        loc, msg = _first_error(err)
        raise ConfigError(source, loc, msg) from None
    except RecursionError:
        raise KvscopeError(f"{source}: YAML nested too deeply.") from None
    try:
        interval = _duration(pack.interval)
    except ValueError as err:
        raise ConfigError(source, "interval", str(err)) from None
    if interval < MIN_INTERVAL_S:
        raise ConfigError(source, "interval", f"must be at least 1s, not {pack.interval}")
    tiers = []
    for tier, t in pack.tiers.items():
        try:
            actions = tuple(a.build() for a in t.actions)
        except ValueError as err:
            raise ConfigError(f"{source}: tier '{tier}'", "actions", str(err)) from None
        try:
            response = _duration(t.response)
        except ValueError as err:
            raise ConfigError(f"{source}: tier '{tier}'", "response", str(err)) from None
        tiers.append(TierPolicy(tier, response, actions))
    for tier in Tier:
        if tier not in pack.tiers:
            tiers.append(TierPolicy(tier, DEFAULT_RESPONSE_S[tier], (Action("log"),)))
    windows = []
    for i, w in enumerate(pack.schedule.peak_windows):
        if w.end <= w.start:
            raise ConfigError(source, f"schedule.peak_windows.{i}.end", "must be after start")
        windows.append(PeakWindow(tuple(DAYS[d] for d in w.days), w.start, w.end))
    rules = tuple(_rule(raw, i, source) for i, raw in enumerate(pack.rules))
    seen: set[str] = set()
    for r in rules:
        for n in (r.name, r.escalated_name):
            if n in seen:
                raise ConfigError(f"{source}: rule '{r.name}'", "name", "is used twice")
            seen.add(n)
    schedule = Schedule(tuple(windows), tuple(sorted(pack.schedule.holidays)))
    return RulePack(
        rules,
        tuple(sorted(tiers, key=lambda p: list(Tier).index(p.tier))),
        schedule,
        interval,
        source,
    )


def load_pack(path: str | Path | None = None) -> RulePack:
    """Load a rule file; ``None`` loads kvscope's default pack."""
    if path is None:
        text = resources.files("kvscope.alerts").joinpath("default_rules.yaml").read_text()
        return load_pack_text(text, "default_rules.yaml")
    p = Path(path)
    return load_pack_text(read_text(p, "rule file"), str(p))
