"""The evaluator on series with known answers; replay from a real DuckDB store; live mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.alerts.evaluate import (
    LiveEvaluator,
    SeriesSet,
    evaluate_live,
    load_store,
    replay,
)
from kvscope.alerts.loader import load_pack, load_pack_text
from kvscope.alerts.scenarios import first_firing_step, scenario, series_set
from kvscope.telemetry.series import Sample
from kvscope.telemetry.store import Store

E = "engine:127.0.0.1:8000"

PACK = """
interval: 1m
rules:
  - {name: KvFull, signal: kv_cache_usage_ratio, kind: threshold, threshold: 0.9, for: 5m,
     tier: alert, why: w, escalate_after: 3}
  - {name: Storm, signal: preemptions, kind: rate, window: 2m, threshold: 5, for: 0s,
     tier: warning, why: w}
  - {name: Stale, signal: engine_up, kind: stale, threshold: 120, tier: warning, why: w}
"""


def kv_series(values: list[float]) -> SeriesSet:
    data = SeriesSet()
    for k, v in enumerate(values):
        data.add("kv_cache_usage_ratio", E, "", 60.0 * k, v)
    return data


def test_threshold_fires_after_for_and_resolves() -> None:
    pack = load_pack_text(PACK)
    vals = [0.5] * 3 + [0.95] * 10 + [0.5] * 3  # crosses at step 3
    rep = replay(pack, kv_series(vals), record_steps=True)
    kv = [(e.t_s, e.alertname, e.state) for e in rep.events if e.rule == "KvFull"]
    # pending at 3 min, firing at 3 + 5 = 8 min; escalated after 3 consecutive firings
    # (8, 9, 10 min) -> at 10 min; both resolve when the value drops at 13 min.
    assert kv == [
        (480.0, "KvFull", "firing"),
        (600.0, "KvFullEscalated", "firing"),
        (780.0, "KvFull", "resolved"),
        (780.0, "KvFullEscalated", "resolved"),
    ]
    esc = next(e for e in rep.events if e.alertname == "KvFullEscalated")
    assert str(esc.tier) == "critical"
    assert dict(esc.labels) == {"engine": "127.0.0.1:8000"}


def test_a_dip_restarts_the_for_clock() -> None:
    pack = load_pack_text(PACK)
    vals = [0.95] * 4 + [0.5] + [0.95] * 6
    rep = replay(pack, kv_series(vals))
    fired = [e.t_s for e in rep.events if e.alertname == "KvFull" and e.state == "firing"]
    assert fired == [600.0]  # pending again at 5 min, firing at 10 min


def test_rate_and_staleness_known_answers() -> None:
    pack = load_pack_text(PACK)
    data = SeriesSet()
    total = 0.0
    for k in range(12):
        total += 10.0 if k >= 4 else 1.0  # 10 per minute from the 4th minute
        data.add("preemptions_total", E, "", 60.0 * k, total)
        if k < 6:
            data.add("engine_up", E, "", 60.0 * k, 1.0)
    rep = replay(pack, data)
    storm = [(e.t_s, e.state) for e in rep.events if e.rule == "Storm"]
    # window [2, 4] min: increase 1 + 10 = 11 over 2 min = 5.5/min > 5 -> fires at 4 min
    assert storm == [(240.0, "firing")]
    stale = [(e.t_s, e.state) for e in rep.events if e.rule == "Stale"]
    # last sample at 5 min: age 180 s at 8 min; gone from the 5 min lookback after 10 min
    assert stale == [(480.0, "firing"), (660.0, "resolved")]


def test_throttle_ignores_idle_reason() -> None:
    pack = load_pack()
    rule = pack.rule("GpuThrottled")
    fires = scenario(rule, pack, "fires")
    quiet = scenario(rule, pack, "quiet")
    assert any("ignored_reason" in s.labels for s in quiet.series)
    assert first_firing_step(pack, quiet) is None
    assert first_firing_step(pack, fires) == fires.change_step + 5  # for: 5m


@pytest.mark.parametrize(
    ("name", "expected_offset"),
    [
        ("KvCacheNearFull", 5),  # threshold: for 5m
        ("GpuMemoryCritical", 1),  # ratio used/total: for 1m
        ("KvCacheHigh", 10),  # median of 11 samples high after 6 of them (5), + for 5m
        ("AllocationRetriesHigh", 3),  # rate over 2 m passes 5/min one step late, + for 2m
        ("EngineDown", 1),
        ("SamplesStale", 2),  # age 180 s > 120 s two steps after the last sample
    ],
)
def test_default_rules_fire_at_known_steps(name: str, expected_offset: int) -> None:
    pack = load_pack()
    scn = scenario(pack.rule(name), pack, "fires")
    assert first_firing_step(pack, scn) == scn.change_step + expected_offset


def test_replay_from_store_matches_in_memory(tmp_path: Path) -> None:
    pack = load_pack()
    scn = scenario(pack.rule("PreemptionStorm"), pack, "fires")
    t0 = 1_764_399_960.0  # 2025-11-29, a whole minute (replay steps align to the interval)
    samples = [
        Sample(t0 + k * 60.0, s.source, s.metric, v, s.labels)
        for s in scn.series
        for k, v in enumerate(s.values)
        if v is not None
    ]
    path = tmp_path / "kv.duckdb"
    with Store(path) as st:
        st.append(samples)
        st.append([Sample(t0, E, "unrelated_metric", 1.0)])
    data = load_store(str(path), pack)
    from_store = replay(pack, data)
    in_memory = replay(pack, series_set(scn))
    shifted = [(e.t_s - t0, e.alertname, e.state) for e in from_store.events]
    assert shifted == [(e.t_s, e.alertname, e.state) for e in in_memory.events]
    assert any(a == "PreemptionStormEscalated" for _, a, _ in shifted)
    since = replay(pack, load_store(str(path), pack, t0 + 600), start_s=t0 + 600)
    assert since.start_s == t0 + 600


def test_live_equals_replay() -> None:
    pack = load_pack()
    scn = scenario(pack.rule("QueueGrowing"), pack, "fires")
    live = LiveEvaluator(pack)
    events = []
    for k in range(scn.steps):
        tick = [
            Sample(k * 60.0, s.source, s.metric, v, s.labels)
            for s in scn.series
            if (v := s.values[k]) is not None
        ]
        events += evaluate_live(live, tick, k * 60.0)
    offline = replay(pack, series_set(scn))
    assert [(e.t_s, e.alertname, e.state) for e in events] == [
        (e.t_s, e.alertname, e.state) for e in offline.events
    ]
    assert {e.alertname for e in events} == {"QueueGrowing", "QueueGrowingEscalated"}


def test_replay_of_nothing_is_an_error() -> None:
    from kvscope.errors import KvscopeError

    with pytest.raises(KvscopeError, match="no samples"):
        replay(load_pack(), SeriesSet())
