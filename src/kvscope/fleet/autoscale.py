"""Autoscaling what-ifs: a replica-count schedule, or a threshold policy with a provisioning delay.

``--autoscale schedule:0=2,3600=8,7200=4`` sets the routable replica count from each time on
(seconds of the workload's clock; the first entry must be at 0). ``--autoscale
queue:up=8,down=1,min=1,initial=2,interval=30,delay=120`` (or ``kv:...`` on KV usage, a
fraction) reads the mean of the metric over the routable replicas at the first arrival after
each ``interval`` seconds: above ``up`` one more replica is provisioned and takes requests
``delay`` seconds later (the Kubernetes HPA's one-step rule with a pod start time); below
``down`` the newest replica drains: it takes no new requests and serves what it holds to the
end (nothing is dropped). ``min`` (default 1) and the fleet's declared replicas bound the
count; ``initial`` (default ``min``) is the count at time 0. Units: seconds, requests, fraction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvscope.errors import KvscopeError
from kvscope.validate import count, finite

_FLAG = "--autoscale"


@dataclass(frozen=True)
class Schedule:
    """Routable replicas from each time on: ``((t0=0, n0), (t1, n1), ...)``, times rising."""

    steps: tuple[tuple[float, int], ...]

    def count_at(self, t: float) -> int:
        n = self.steps[0][1]
        for at, k in self.steps:
            if at > t:
                break
            n = k
        return n


@dataclass(frozen=True)
class Threshold:
    """One replica more above ``up``, one fewer below ``down``, every ``interval_s``."""

    metric: Literal["queue", "kv"]
    up: float
    down: float
    min: int = 1
    initial: int | None = None
    interval_s: float = 30.0
    delay_s: float = 60.0


Policy = Schedule | Threshold


def parse_autoscale(text: str, replicas: int) -> Policy:
    """``schedule:T=N,...`` or ``queue|kv:up=..,down=..[,min,initial,interval,delay]``,
    checked against the fleet's ``replicas``; errors name ``--autoscale`` and the key."""
    kind, sep, rest = text.strip().partition(":")
    pairs = []
    for item in rest.split(","):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise KvscopeError(f"{_FLAG}: '{item.strip()}' is not KEY=VALUE in '{text}'.")
        pairs.append((key.strip(), value.strip()))
    if not sep:
        raise KvscopeError(f"{_FLAG} must be schedule:T=N,... or queue|kv:up=..,down=..")
    if kind == "schedule":
        return _schedule(pairs, replicas)
    if kind in ("queue", "kv"):
        return _threshold(kind, dict(pairs), replicas)  # type: ignore[arg-type]
    raise KvscopeError(f"{_FLAG} kind must be schedule, queue or kv, got '{kind}'.")


def _num(value: str, key: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise KvscopeError(f"{_FLAG} {key}: '{value}' is not a number.") from None


def _schedule(pairs: list[tuple[str, str]], replicas: int) -> Schedule:
    steps = []
    for t_text, n_text in pairs:
        t = finite(_num(t_text, "time"), f"{_FLAG} time", low=0)
        n = count(_num(n_text, t_text), f"{_FLAG} replicas at {t_text}", low=1, high=replicas)
        steps.append((t, n))
    times = [t for t, _ in steps]
    if times[0] != 0 or times != sorted(set(times)):
        raise KvscopeError(f"{_FLAG} schedule times must start at 0 and rise.")
    return Schedule(tuple(steps))


def _threshold(kind: Literal["queue", "kv"], kv: dict[str, str], replicas: int) -> Threshold:
    known = {"up", "down", "min", "initial", "interval", "delay"}
    for key in kv:
        if key not in known:
            raise KvscopeError(f"{_FLAG} {kind}: unknown key '{key}' (known: {sorted(known)}).")
    for key in ("up", "down"):
        if key not in kv:
            raise KvscopeError(f"{_FLAG} {kind}: '{key}' is required.")
    high = 1.0 if kind == "kv" else None
    up = finite(_num(kv["up"], "up"), f"{_FLAG} up", low=0, high=high)
    down = finite(_num(kv["down"], "down"), f"{_FLAG} down", low=0, high=up)
    low = count(_num(kv.get("min", "1"), "min"), f"{_FLAG} min", low=1, high=replicas)
    initial = count(
        _num(kv.get("initial", str(low)), "initial"),
        f"{_FLAG} initial",
        low=low,
        high=replicas,
    )
    interval = finite(_num(kv.get("interval", "30"), "interval"), f"{_FLAG} interval", low=0)
    if interval <= 0:
        raise KvscopeError(f"{_FLAG} interval must be > 0 seconds.")
    delay = finite(_num(kv.get("delay", "60"), "delay"), f"{_FLAG} delay", low=0)
    return Threshold(kind, up, down, low, initial, interval, delay)


class Scaler:
    """The target replica count over time (stateful: the next evaluation time)."""

    def __init__(self, policy: Policy | None, replicas: int) -> None:
        self.policy = policy
        self.replicas = replicas
        self._next_eval = 0.0

    def initial(self) -> int:
        p = self.policy
        if p is None:
            return self.replicas
        if isinstance(p, Schedule):
            return p.count_at(0.0)
        return p.initial if p.initial is not None else p.min

    @property
    def delay_s(self) -> float:
        return self.policy.delay_s if isinstance(self.policy, Threshold) else 0.0

    def target(self, t: float, active: int, metric: dict[str, float]) -> int:
        """The count wanted at ``t`` given ``active`` replicas (provisioning included) and
        the routable replicas' mean ``queue`` and ``kv``."""
        p = self.policy
        if p is None:
            return active
        if isinstance(p, Schedule):
            return p.count_at(t)
        if t < self._next_eval:
            return active
        self._next_eval = t + p.interval_s
        value = metric[p.metric]
        if value > p.up and active < self.replicas:
            return active + 1
        if value < p.down and active > p.min:
            return active - 1
        return active
