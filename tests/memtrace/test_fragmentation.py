"""Fragmentation of the generated scenarios, pinned to the numbers their design implies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.memtrace.analysis import analyze
from kvscope.memtrace.fragmentation import Replay, free_gaps, segment_table, summarize
from kvscope.memtrace.load import load_snapshot

MIB = 1 << 20


def test_fragmentation_scenario_end_state(snaps: dict[str, Path]) -> None:
    cols, _ = load_snapshot(snaps["fragmentation"])
    rows = segment_table(cols)
    # segment 1: ten 2 MiB blocks, every other one freed -> five 2 MiB holes
    # segment 2: four 5 MiB blocks, the middle two freed -> one 10 MiB hole
    assert [(r.total_bytes, r.free_bytes, r.largest_free_bytes) for r in rows] == [
        (20 * MIB, 10 * MIB, 2 * MIB),
        (20 * MIB, 10 * MIB, 10 * MIB),
    ]
    assert [r.external_frag for r in rows] == [0.8, 0.0]
    overall = summarize(cols, rows)[0]
    assert overall.scope == "all"
    assert overall.free_bytes == 20 * MIB
    assert overall.largest_free_bytes == 10 * MIB
    assert overall.external_frag == 0.5
    # Sawicki: 1 - sqrt(5 * 2^2 + 10^2) / 20 = 1 - sqrt(120) / 20
    assert abs(overall.rss_frag - 0.452277442494834) < 1e-12
    assert overall.internal_waste_bytes == 0


def test_internal_waste_counts_rounding(snaps: dict[str, Path]) -> None:
    # steady weights are k MiB + up to 4095 B: rounding to 512 B leaves slack per tensor
    cols, _ = load_snapshot(snaps["steady"])
    overall = summarize(cols, segment_table(cols))[0]
    sg = cols.segments
    active = sg.blk_state == 1
    assert overall.internal_waste_bytes == int((sg.blk_size - sg.blk_requested)[active].sum())
    assert 0 < overall.internal_waste_bytes < 8 * 512


def test_replay_at_the_end_matches_the_end_state(snaps: dict[str, Path]) -> None:
    for name in ("fragmentation", "oom", "leak", "steady"):
        cols, _ = load_snapshot(snaps[name])
        fs = Replay(cols).at(len(cols.trace) - 1, 0)
        overall = summarize(cols, segment_table(cols))[0]
        assert (fs.reserved_bytes, fs.free_bytes, fs.largest_free_bytes) == (
            overall.reserved_bytes,
            overall.free_bytes,
            overall.largest_free_bytes,
        ), name


def test_course_reaches_half_after_the_pattern(snaps: dict[str, Path]) -> None:
    r = analyze(load_snapshot(snaps["fragmentation"])[0])
    assert r.fragmentation_course[-1].external_frag == 0.5
    assert r.fragmentation_course[-1].free_bytes == 20 * MIB


def test_free_gaps_by_hand() -> None:
    seg_addr = np.array([1000, 0], np.int64)
    seg_size = np.array([100, 100], np.int64)
    blk_addr = np.array([10, 50, 1000, 1090], np.int64)
    blk_size = np.array([20, 50, 30, 10], np.int64)
    assert sorted(free_gaps(seg_addr, seg_size, blk_addr, blk_size).tolist()) == [10, 20, 60]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 50), st.booleans()), min_size=1, max_size=30),
)
def test_free_gaps_conserve_bytes(blocks: list[tuple[int, bool]]) -> None:
    """Tiling one segment with used/free blocks: gaps sum to the free bytes and the largest
    gap is the longest run of consecutive free blocks."""
    total = sum(s for s, _ in blocks)
    addr, used_a, used_s, run, best = 0, [], [], 0, 0
    for size, used in blocks:
        if used:
            used_a.append(addr)
            used_s.append(size)
            run = 0
        else:
            run += size
            best = max(best, run)
        addr += size
    g = free_gaps(
        np.array([0], np.int64),
        np.array([total], np.int64),
        np.array(used_a, np.int64),
        np.array(used_s, np.int64),
    )
    assert int(g.sum()) == sum(s for s, u in blocks if not u)
    assert (int(g.max()) if g.size else 0) == best


def test_mapped_pieces_of_an_expandable_segment_merge() -> None:
    # two 2 MiB mapped pieces, 1 MiB used at each end: 2 MiB free across the boundary
    seg_addr = np.array([0, 2 * MIB], np.int64)
    seg_size = np.array([2 * MIB, 2 * MIB], np.int64)
    blk_addr = np.array([0, 3 * MIB], np.int64)
    blk_size = np.array([MIB, MIB], np.int64)
    both = np.array([True, True])
    assert free_gaps(seg_addr, seg_size, blk_addr, blk_size, both).tolist() == [2 * MIB]
    # ordinary segments that happen to touch do not merge
    assert free_gaps(seg_addr, seg_size, blk_addr, blk_size).tolist() == [MIB, MIB]


def test_replay_of_segment_map(tmp_path: Path) -> None:
    import pickle

    base = 0x7F0000000000

    def e(action: str, addr: int, size: int, t: int) -> dict[str, object]:
        return {
            "action": action,
            "addr": addr,
            "size": size,
            "stream": 0,
            "time_us": t,
            "frames": [],
        }

    trace = [
        e("segment_map", base, 2 * MIB, 1),
        e("alloc", base, MIB, 2),
        e("segment_map", base + 2 * MIB, 2 * MIB, 3),
        e("alloc", base + 3 * MIB, MIB, 4),
    ]
    blocks = [
        {"address": base, "size": MIB, "requested_size": MIB, "state": "active_allocated"},
        {"address": base + MIB, "size": 2 * MIB, "requested_size": 0, "state": "inactive"},
        {
            "address": base + 3 * MIB,
            "size": MIB,
            "requested_size": MIB,
            "state": "active_allocated",
        },
    ]
    seg = {
        "device": 0,
        "address": base,
        "total_size": 4 * MIB,
        "stream": 0,
        "segment_type": "large",
        "is_expandable": True,
        "blocks": blocks,
    }
    p = tmp_path / "exp.pickle"
    p.write_bytes(pickle.dumps({"segments": [seg], "device_traces": [trace]}))
    cols, _ = load_snapshot(p)
    fs = Replay(cols).at(3, 0)
    assert (fs.reserved_bytes, fs.free_bytes, fs.largest_free_bytes) == (4 * MIB, 2 * MIB, 2 * MIB)
    overall = summarize(cols, segment_table(cols))[0]
    assert overall.largest_free_bytes == 2 * MIB and overall.external_frag == 0.0


def test_scopes_split_by_device_pool_and_stream(handmade: Callable[[], dict[str, Any]]) -> None:
    from kvscope.memtrace.columns import to_columns

    cols = to_columns(handmade())
    scopes = [f.scope for f in summarize(cols, segment_table(cols))]
    assert scopes == ["all", "device0/large", "device1/small/stream0x7"]


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), steps=st.integers(1, 25), leak=st.booleans())
def test_replay_accounts_for_every_free_byte(seed: int, steps: int, leak: bool) -> None:
    """At the last entry the replay's free bytes are the end state's free blocks plus the
    slack the allocator kept inside unsplit blocks (which the trace cannot see)."""
    from kvscope.memtrace.columns import to_columns
    from kvscope.memtrace.generator import GeneratorConfig, generate

    cfg = GeneratorConfig(
        scenario="leak" if leak else "steady",
        seed=seed,
        steps=steps,
        weight_tensors=4,
        kv_cache_bytes=64 * MIB,
        step_s=0.4,
    )
    cols = to_columns(generate(cfg))
    sg = cols.segments
    active = sg.blk_state == 1
    rounded = -(-sg.blk_requested[active] // 512) * 512
    slack = int((sg.blk_size[active] - rounded).sum())
    end = summarize(cols, segment_table(cols))[0]
    fs = Replay(cols).at(len(cols.trace) - 1, 0)
    assert fs.reserved_bytes == end.reserved_bytes
    assert fs.free_bytes == end.free_bytes + slack
    assert fs.largest_free_bytes >= end.largest_free_bytes
