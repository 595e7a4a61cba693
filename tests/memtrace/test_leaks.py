"""Leak candidates: the right site and the slope of the generated leak."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.memtrace.analysis import analyze
from kvscope.memtrace.load import load_snapshot


def test_leak_slope_and_site(snaps: dict[str, Path]) -> None:
    r = analyze(load_snapshot(snaps["leak"])[0])
    assert len(r.leaks) == 1
    lk = r.leaks[0]
    assert lk.site == "app/request_cache.py:42:remember"
    # 1 MiB per second = 1048576 * 60 / 1e6 MB/min
    assert lk.slope_mb_per_min == pytest.approx(62.91456, rel=1e-3)
    assert lk.live_count == 59 and lk.r2 > 0.999


def test_faster_leak(snaps: dict[str, Path]) -> None:
    r = analyze(load_snapshot(snaps["leak_fast"])[0])
    assert [lk.site for lk in r.leaks] == ["app/request_cache.py:42:remember"]
    # 2 MiB every 0.5 s = 2097152 * 120 / 1e6 MB/min
    assert r.leaks[0].slope_mb_per_min == pytest.approx(251.65824, rel=1e-3)


def test_no_leak_in_steady_state(snaps: dict[str, Path]) -> None:
    # weights and the KV pool are live at the end too, but were allocated in one burst
    assert analyze(load_snapshot(snaps["steady"])[0]).leaks == []


def test_window_before_the_leak_starts_sees_fewer(snaps: dict[str, Path]) -> None:
    cols = load_snapshot(snaps["leak"])[0]
    r = analyze(cols, since_s=30.0)
    assert r.leaks[0].live_count == 30  # the leaks at 30 s .. 59 s
    assert r.leaks[0].slope_mb_per_min == pytest.approx(62.91456, rel=1e-3)
