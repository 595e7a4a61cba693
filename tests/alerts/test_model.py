"""Rule records: durations, tiers, schedule-dependent thresholds."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvscope.alerts.model import (
    Kind,
    PeakWindow,
    Rule,
    Schedule,
    Tier,
    format_duration,
    parse_duration,
)


def _rule(**kw: object) -> Rule:
    base: dict[str, object] = dict(
        name="R",
        signal="kv_cache_usage_ratio",
        kind=Kind.THRESHOLD,
        op=">",
        threshold=0.8,
        for_s=0.0,
        tier=Tier.WARNING,
        why="w",
        summary="s",
    )
    base.update(kw)
    return Rule(**base)  # type: ignore[arg-type]


def test_durations() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("90s") == 90
    assert parse_duration("250ms") == 0.25
    assert format_duration(5400) == "1h30m"
    assert format_duration(0) == "0s"
    for bad in ("", "5", "5 m", "m5", "1.5h", "5x"):
        with pytest.raises(ValueError):
            parse_duration(bad)


@given(st.integers(min_value=0, max_value=10 * 86400))
def test_duration_round_trip(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


def test_tier_order() -> None:
    assert Tier.WARNING.next() is Tier.ALERT
    assert Tier.ALERT.next() is Tier.CRITICAL
    assert Tier.CRITICAL.next() is None


def test_threshold_schedule() -> None:
    # 2026-11-26 is a Thursday; 10:00 UTC inside a Mon-Fri 9-17 window.
    sched = Schedule(
        peak_windows=(PeakWindow((1, 2, 3, 4, 5), 9, 17),),
        holidays=(dt.date(2026, 12, 25),),
    )
    r = _rule(peak_relax=0.2, holiday_threshold=0.9)
    thu_10 = dt.datetime(2026, 11, 26, 10, tzinfo=dt.UTC).timestamp()
    thu_08 = dt.datetime(2026, 11, 26, 8, 59, tzinfo=dt.UTC).timestamp()
    sat_10 = dt.datetime(2026, 11, 28, 10, tzinfo=dt.UTC).timestamp()
    xmas_10 = dt.datetime(2026, 12, 25, 10, tzinfo=dt.UTC).timestamp()  # a Friday
    xmas_20 = dt.datetime(2026, 12, 25, 20, tzinfo=dt.UTC).timestamp()
    assert r.threshold_at(thu_10, sched) == pytest.approx(0.96)
    assert r.threshold_at(thu_08, sched) == 0.8
    assert r.threshold_at(sat_10, sched) == 0.8
    assert r.threshold_at(xmas_10, sched) == pytest.approx(1.08)
    assert r.threshold_at(xmas_20, sched) == 0.9
    below = _rule(op="<", threshold=10.0, peak_relax=0.2)
    assert below.threshold_at(thu_10, sched) == pytest.approx(8.0)
