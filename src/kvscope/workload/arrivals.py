"""Arrival processes: when requests arrive, as sorted seconds from t = 0, generated with numpy.

Open-loop processes (the arrival of one request does not wait for another):

* ``Constant`` - one request every ``1/rate`` s (CV 0).
* ``Renewal`` - i.i.d. gamma gaps with mean ``1/rate`` and coefficient of variation ``cv``;
  ``cv = 1`` is Poisson. This is the same burstiness knob as vLLM's ``--burstiness``
  (``burstiness = 1/cv**2`` is the gamma shape; vllm/benchmarks/serve.py).
* Time-varying shapes (``Spike``, ``Ramp``, ``Steps``, ``Diurnal``, ``OnOff``) - a rate
  function ``rate(t)`` in requests/s, realised by the time-rescaling theorem: unit-mean renewal
  points (Poisson, or gamma with ``cv``) are mapped through the inverse of the cumulative
  intensity ``Lambda(t) = integral of rate``. ``Lambda`` is tabulated on a fine grid and
  inverted with ``np.interp`` (exact for a piecewise-constant rate per cell).
* ``Sum`` - superposition of independent processes (e.g. Poisson background plus a spike).

Closed-loop load (``Concurrency``) has no precomputed times: every request is ready at t = 0
and the consumer keeps ``n`` in flight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from kvscope.errors import KvscopeError
from kvscope.workload.limits import check_request_count

F64 = NDArray[np.float64]

#: Finest grid cell used to tabulate Lambda(t), seconds; bounds the timing error at a rate step.
GRID_DT_S = 0.01
#: Most grid cells per generation (memory bound: 16 bytes per cell).
MAX_GRID_CELLS = 4_000_000


class Process(Protocol):
    """What every open-loop arrival process provides."""

    def expected_count(self, horizon_s: float) -> float: ...
    def generate(self, rng: np.random.Generator, horizon_s: float) -> F64: ...


def _unit_points(rng: np.random.Generator, cv: float, limit: float) -> F64:
    """Points of a unit-rate renewal process (gamma gaps, mean 1, given CV) up to ``limit``."""
    n = int(limit + 6 * math.sqrt(max(limit, 1.0)) * max(cv, 1.0) + 16)
    out: list[F64] = []
    last = 0.0
    while True:
        gaps = _gaps(rng, cv, 1.0, n)
        pts = last + np.cumsum(gaps)
        out.append(pts)
        last = float(pts[-1])
        if last >= limit:
            break
    allp = np.concatenate(out)
    return allp[allp < limit]


def _gaps(rng: np.random.Generator, cv: float, rate: float, n: int) -> F64:
    if cv == 0:
        return np.full(n, 1.0 / rate)
    if cv == 1:
        return rng.exponential(1.0 / rate, size=n)
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, 1.0 / (rate * shape), size=n)


@dataclass(frozen=True)
class Constant:
    """Evenly spaced arrivals at ``rate`` requests/s, the first at t = 0."""

    rate: float

    def expected_count(self, horizon_s: float) -> float:
        return self.rate * horizon_s

    def generate(self, rng: np.random.Generator, horizon_s: float) -> F64:
        n = math.ceil(self.rate * horizon_s - 1e-9)
        return np.arange(max(n, 0), dtype=np.float64) / self.rate


@dataclass(frozen=True)
class Renewal:
    """Gamma-distributed gaps with mean ``1/rate`` s and coefficient of variation ``cv``."""

    rate: float
    cv: float = 1.0

    def expected_count(self, horizon_s: float) -> float:
        return self.rate * horizon_s

    def generate(self, rng: np.random.Generator, horizon_s: float) -> F64:
        return _unit_points(rng, self.cv, self.rate * horizon_s) / self.rate

    def first(self, rng: np.random.Generator, n: int) -> F64:
        """Exactly ``n`` arrivals (no horizon needed)."""
        return np.cumsum(_gaps(rng, self.cv, self.rate, n))


class Shape:
    """A time-varying rate ``rate(t)`` (requests/s) realised by time rescaling."""

    cv: float = 1.0

    def rates(self, t: F64, rng: np.random.Generator) -> F64:  # pragma: no cover - abstract
        raise NotImplementedError

    def _grid(self, horizon_s: float) -> tuple[F64, float]:
        cells = int(min(max(horizon_s / GRID_DT_S, 1000), MAX_GRID_CELLS))
        dt = horizon_s / cells
        return (np.arange(cells, dtype=np.float64) + 0.5) * dt, dt

    def cumulative(self, horizon_s: float, rng: np.random.Generator) -> tuple[F64, F64]:
        """Grid edges (s) and Lambda at each edge."""
        mid, dt = self._grid(horizon_s)
        lam = np.zeros(len(mid) + 1)
        # An extreme shape (an exponential ramp to 1e308) overflows to inf; the request-count
        # check then refuses it by name, without numpy's warning on stderr.
        with np.errstate(over="ignore", invalid="ignore"):
            np.cumsum(np.maximum(self.rates(mid, rng), 0.0) * dt, out=lam[1:])
        edges = np.arange(len(mid) + 1, dtype=np.float64) * dt
        return edges, lam

    def expected_count(self, horizon_s: float) -> float:
        _, lam = self.cumulative(horizon_s, np.random.default_rng(0))
        return float(lam[-1])

    def generate(self, rng: np.random.Generator, horizon_s: float) -> F64:
        level_rng, point_rng = rng.spawn(2)
        edges, lam = self.cumulative(horizon_s, level_rng)
        units = _unit_points(point_rng, self.cv, float(lam[-1]))
        return np.interp(units, lam, edges)


@dataclass(frozen=True)
class Spike(Shape):
    """``base`` req/s, jumping to ``peak`` for ``length`` s from ``start`` s."""

    base: float
    peak: float
    start: float
    length: float
    cv: float = 1.0

    def rates(self, t: F64, rng: np.random.Generator) -> F64:
        inside = (t >= self.start) & (t < self.start + self.length)
        return np.where(inside, self.peak, self.base)


@dataclass(frozen=True)
class Ramp(Shape):
    """From ``start_rate`` to ``end_rate`` over ``duration`` s (linear or exp), then hold."""

    start_rate: float
    end_rate: float
    duration: float
    curve: str = "linear"
    cv: float = 1.0

    def rates(self, t: F64, rng: np.random.Generator) -> F64:
        x = np.clip(t / self.duration, 0.0, 1.0)
        if self.curve == "exp":
            return self.start_rate * (self.end_rate / self.start_rate) ** x
        return self.start_rate + (self.end_rate - self.start_rate) * x


@dataclass(frozen=True)
class Steps(Shape):
    """A new level, uniform in [``low``, ``high``] req/s, every ``interval`` s (seeded)."""

    low: float
    high: float
    interval: float
    cv: float = 1.0

    def rates(self, t: F64, rng: np.random.Generator) -> F64:
        with np.errstate(over="ignore", invalid="ignore"):
            cells = t // self.interval
        if len(t) and not float(cells.max()) < 2**53:
            raise KvscopeError(
                f"steps interval {self.interval:g} s is too short for a {float(t.max()):g} s "
                "horizon."
            )
        k = cells.astype(np.int64)
        # One level per interval that occurs (not per interval up to the last), so an interval
        # far below the grid cell costs nothing; when every interval occurs (interval >= grid
        # cell, the usual case) the draws are exactly one per interval, in order.
        uniq, inverse = np.unique(k, return_inverse=True)
        levels = rng.uniform(self.low, self.high, size=len(uniq))
        out: F64 = levels[inverse]
        return out


@dataclass(frozen=True)
class Diurnal(Shape):
    """Sinusoidal day: ``mean * (1 + amplitude * cos(2 pi (t - peak_at) / period))`` req/s."""

    mean: float
    amplitude: float
    period: float = 86_400.0
    peak_at: float = 0.0
    cv: float = 1.0

    def rates(self, t: F64, rng: np.random.Generator) -> F64:
        phase = 2.0 * np.pi * (t - self.peak_at) / self.period
        return self.mean * (1.0 + self.amplitude * np.cos(phase))


@dataclass(frozen=True)
class OnOff(Shape):
    """Bursts: ``rate`` req/s for ``on`` s, then ``base`` (default 0) for ``off`` s, repeating."""

    rate: float
    on: float
    off: float
    base: float = 0.0
    cv: float = 1.0

    def rates(self, t: F64, rng: np.random.Generator) -> F64:
        return np.where((t % (self.on + self.off)) < self.on, self.rate, self.base)


@dataclass(frozen=True)
class Sum:
    """Superposition of independent processes."""

    parts: tuple[Process, ...]

    def expected_count(self, horizon_s: float) -> float:
        return sum(p.expected_count(horizon_s) for p in self.parts)

    def generate(self, rng: np.random.Generator, horizon_s: float) -> F64:
        rngs = rng.spawn(len(self.parts))
        got = [p.generate(r, horizon_s) for p, r in zip(self.parts, rngs, strict=True)]
        return np.sort(np.concatenate(got), kind="stable")


@dataclass(frozen=True)
class Concurrency:
    """Closed loop: keep ``n`` requests in flight; ``think_s`` pause before a slot is reused."""

    n: int
    think_s: float = 0.0


def generate_arrivals(
    process: Process,
    seed: int | np.random.SeedSequence,
    *,
    num_requests: int | None = None,
    duration_s: float | None = None,
) -> F64:
    """Arrival times (s, sorted) of ``process``: the first ``num_requests``, those before
    ``duration_s``, or (with both) the first ``num_requests`` that fall before ``duration_s``.
    """
    if num_requests is None and duration_s is None:
        raise KvscopeError(
            "a synthetic arrival process needs --num-requests or --duration to know when to stop."
        )
    if num_requests is not None and num_requests < 0:
        raise KvscopeError(f"--num-requests must be >= 0, got {num_requests}.")
    if duration_s is not None and not duration_s > 0:
        raise KvscopeError(f"--duration must be positive, got {duration_s}.")
    if duration_s is not None:
        drawn = allocation_estimate(process, duration_s)
        if num_requests is not None and drawn > num_requests and not _fits(drawn):
            # The horizon alone would draw too many points; the first num_requests are enough
            # (arrivals are sorted, so those before duration_s are a prefix of them).
            times = generate_arrivals(process, seed, num_requests=num_requests)
            return times[times < duration_s]
        check_request_count(drawn, f"--duration {duration_s:g} s at this arrival rate")
    else:
        assert num_requests is not None
        check_request_count(num_requests, "--num-requests")
    rng = np.random.default_rng(seed)
    if duration_s is None:
        assert num_requests is not None
        if isinstance(process, Renewal):
            return process.first(rng, num_requests)
        if isinstance(process, Constant):
            return np.arange(num_requests, dtype=np.float64) / process.rate
        horizon = _horizon_for(process, num_requests)
        while True:
            times = process.generate(np.random.default_rng(seed), horizon)
            if len(times) >= num_requests:
                return times[:num_requests]
            horizon *= 2.0
    times = process.generate(rng, duration_s)
    times = times[times < duration_s]
    return times if num_requests is None else times[:num_requests]


def allocation_estimate(process: Process, horizon_s: float) -> float:
    """Points drawn to realise ``process`` up to ``horizon_s`` (mean plus the margin that
    :func:`_unit_points` draws ahead), ``inf`` when the rate overflows."""
    expected = process.expected_count(horizon_s)
    if not math.isfinite(expected):
        return math.inf
    return expected + 6 * math.sqrt(max(expected, 1.0)) * 2 + 16


def _fits(n: float) -> bool:
    try:
        check_request_count(n)
    except KvscopeError:
        return False
    return True


def _horizon_for(process: Process, n: int) -> float:
    """A horizon (s) whose expected count is comfortably above ``n``."""
    horizon = 1.0
    for _ in range(80):
        if process.expected_count(horizon) >= 1.1 * n + 10 * math.sqrt(n) + 10:
            return horizon
        horizon *= 2.0
    raise KvscopeError(
        "the arrival process has (almost) zero rate; it would never produce the requests."
    )
