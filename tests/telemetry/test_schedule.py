"""Drift-free ticks: tick k is due at start + k * interval whatever the work costs."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.telemetry.schedule import Ticker


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wait(self, dt: float) -> bool:
        self.now += dt
        return False


@given(st.lists(st.floats(0.0, 0.099), min_size=1, max_size=50))
def test_ticks_do_not_drift_with_work_shorter_than_interval(work: list[float]) -> None:
    clk = FakeClock()
    ticker = Ticker(0.1, duration_s=len(work) * 0.1, clock=clk, wait=clk.wait)
    fired = []
    for (k, due), w in zip(ticker, work, strict=False):
        fired.append(clk.now)
        assert due == pytest.approx(1000.0 + k * 0.1)
        clk.now += w
    assert len(fired) == len(work)
    assert fired == pytest.approx([1000.0 + 0.1 * k for k in range(len(work))])
    assert ticker.missed == 0


def test_overrun_skips_ticks_instead_of_bursting() -> None:
    clk = FakeClock()
    ticker = Ticker(0.1, duration_s=1.0, clock=clk, wait=clk.wait)
    ks = []
    for k, _ in ticker:
        ks.append(k)
        if k == 2:
            clk.now += 0.35  # one slow tick
    assert ks == [0, 1, 2, 5, 6, 7, 8, 9]
    assert ticker.missed == 2


def test_real_clock_10hz_stays_on_grid() -> None:
    ticker = Ticker(0.1, duration_s=1.0)
    start = None
    errs = []
    for k, _ in ticker:
        now = time.monotonic()
        start = now if start is None else start
        errs.append(now - (start + 0.1 * k))
        time.sleep(0.03)  # work
    assert len(errs) + ticker.missed == 10
    # On a loaded 2-core box single ticks may be late, but lateness never accumulates.
    assert errs[-1] < 0.1


def test_stop_event_ends_a_sleep_at_once() -> None:
    ticker = Ticker(10.0)
    it = iter(ticker)
    next(it)
    ticker.stop.set()
    t0 = time.monotonic()
    assert list(it) == []
    assert time.monotonic() - t0 < 1.0


def test_interval_must_be_positive() -> None:
    with pytest.raises(KvscopeError):
        Ticker(0.0)
