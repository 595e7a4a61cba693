"""Comparing two snapshots' end states."""

from __future__ import annotations

from pathlib import Path

from kvscope.memtrace.compare import compare
from kvscope.memtrace.load import load_snapshot

MIB = 1 << 20


def test_same_end_state(snaps: dict[str, Path]) -> None:
    # the OOM scenario ends exactly where the fragmentation scenario does
    d = compare(load_snapshot(snaps["fragmentation"])[0], load_snapshot(snaps["oom"])[0])
    assert d.reserved_delta_bytes == d.allocated_delta_bytes == d.free_delta_bytes == 0
    assert d.segments_only_in_a == d.segments_only_in_b == 0
    assert d.sites == []


def test_leak_shows_as_site_growth(snaps: dict[str, Path]) -> None:
    d = compare(load_snapshot(snaps["steady"])[0], load_snapshot(snaps["leak"])[0])
    leak = next(s for s in d.sites if "remember" in s.site)
    assert leak.a_bytes == 0 and leak.b_bytes == 59 * MIB  # 59 leaked 1 MiB tensors


def test_segments_only_in_one(snaps: dict[str, Path]) -> None:
    d = compare(load_snapshot(snaps["fragmentation"])[0], load_snapshot(snaps["two_devices"])[0])
    assert d.segments_only_in_a == 0
    assert d.segments_only_in_b == 2 and d.bytes_only_in_b == 40 * MIB
    # free blocks on different devices cannot merge: 40 MiB free, largest still 10 MiB
    assert d.b.free_bytes == 40 * MIB and d.b.external_frag == 0.75
    assert d.external_frag_delta == 0.25
