"""OOM events and allocation retries of the generated OOM scenario."""

from __future__ import annotations

from pathlib import Path

from kvscope.memtrace.analysis import analyze
from kvscope.memtrace.load import load_snapshot

MIB = 1 << 20


def test_oom_event_figures(snaps: dict[str, Path]) -> None:
    r = analyze(load_snapshot(snaps["oom"])[0])
    assert len(r.ooms) == 1
    o = r.ooms[0]
    assert o.requested_bytes == 12 * MIB
    assert o.device_free_bytes == 8 * MIB  # 48 MiB device - 40 MiB reserved
    assert o.reserved_bytes == 40 * MIB
    assert o.allocated_bytes == 20 * MIB
    assert o.free_in_reserved_bytes == 20 * MIB
    assert o.largest_free_bytes == 10 * MIB
    assert o.verdict == "fragmentation"
    assert r.devices[0].alloc_retries == 1
    assert r.headline()["ooms"] == 1


def test_empty_cache_is_not_a_retry(snaps: dict[str, Path]) -> None:
    r = analyze(load_snapshot(snaps["fragmentation"])[0])
    assert r.ooms == []
    assert r.devices[0].alloc_retries == 0


def test_legacy_oom_without_time(snaps: dict[str, Path]) -> None:
    r = analyze(load_snapshot(snaps["legacy"])[0])
    assert not r.has_time
    assert [(o.largest_free_bytes, o.verdict) for o in r.ooms] == [(10 * MIB, "fragmentation")]


def test_capacity_oom(tmp_path: Path) -> None:
    """A full device with one 2 MiB hole asked for 64 MiB: not fragmentation."""
    import pickle

    base = 0x7F0000000000
    blocks = [
        {
            "address": base,
            "size": 18 * MIB,
            "requested_size": 18 * MIB,
            "state": "active_allocated",
        },
        {"address": base + 18 * MIB, "size": 2 * MIB, "requested_size": 0, "state": "inactive"},
    ]
    seg = {"device": 0, "address": base, "total_size": 20 * MIB, "stream": 0, "blocks": blocks}
    trace = [
        {"action": "segment_alloc", "addr": base, "size": 20 * MIB, "stream": 0, "time_us": 1},
        {"action": "alloc", "addr": base, "size": 18 * MIB, "stream": 0, "time_us": 2},
        {"action": "oom", "size": 64 * MIB, "device_free": 1 * MIB, "stream": 0, "time_us": 3},
    ]
    p = tmp_path / "cap.pickle"
    p.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [trace]}))
    r = analyze(load_snapshot(p)[0])
    o = r.ooms[0]
    assert (o.free_in_reserved_bytes, o.largest_free_bytes, o.device_free_bytes) == (
        2 * MIB,
        2 * MIB,
        MIB,
    )
    assert o.verdict == "capacity"
    assert r.devices[0].alloc_retries == 0
