"""Format coverage: every key, action and block state the producers write, old and new."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvscope.errors import KvscopeError
from kvscope.memtrace.columns import (
    ACTION_CODE,
    ACTIVE,
    INACTIVE,
    OOM,
    PENDING_FREE,
    SEG_MAP,
    UNKNOWN,
    to_columns,
)
from kvscope.memtrace.load import load_snapshot

Handmade = Callable[[], dict[str, Any]]

MIB = 1 << 20
F_CPP_NAME = "c10::cuda::CUDACachingAllocator::malloc"


def test_handmade_snapshot_columns(handmade: Handmade) -> None:
    c = to_columns(handmade())
    tr, sg = c.trace, c.segments
    assert len(tr) == 14
    assert tr.device.tolist() == [0] * 9 + [1] * 5
    assert tr.action[0] == SEG_MAP
    assert tr.action[6] == OOM and tr.device_free[6] == 5 * MIB and tr.addr[6] == 0
    assert tr.action[7] == UNKNOWN
    assert c.unknown_actions == {"workspace_snapshot": 1}
    assert sg.blk_state.tolist() == [ACTIVE, PENDING_FREE, PENDING_FREE, INACTIVE, INACTIVE]
    assert sg.is_expandable.tolist() == [True, False]
    assert sg.is_small.tolist() == [False, True]
    assert sg.stream.tolist() == [0, 7]
    # block without an address starts at its segment's address
    assert sg.blk_address[4] == 0x7F1000000000
    assert sg.blk_requested.tolist() == [MIB - 100, MIB, MIB, 0, 0]
    assert c.allocator_settings["max_split_size"] == 2**64 - 1
    # frames interned: cpp frame + user frame shared by all stacked entries
    assert c.frames.frames == [("??", 0, F_CPP_NAME), ("train.py", 7, "step")]
    assert set(tr.stack[tr.stack >= 0].tolist()) == {0}


def test_unshared_frames_intern_to_the_same_stack(handmade: Handmade) -> None:
    snap = handmade()
    for e in snap["device_traces"][0]:
        e["frames"] = [dict(f) for f in e["frames"]]  # copies: identity no longer helps
    a, b = to_columns(handmade()), to_columns(snap)
    assert a.frames == b.frames
    np.testing.assert_array_equal(a.trace.stack, b.trace.stack)


def test_legacy_flavor(snaps: dict[str, Path]) -> None:
    cols, _ = load_snapshot(snaps["legacy"])
    assert cols.legacy_blocks and not cols.has_time
    assert cols.trace.time_us.tolist() == list(range(len(cols.trace)))
    active = cols.segments.blk_state == ACTIVE
    assert int(cols.segments.blk_requested[active].sum()) == 20 * MIB


def test_bare_segment_list(tmp_path: Path, handmade: Handmade) -> None:
    p = tmp_path / "old.pickle"
    p.write_bytes(pickle.dumps(handmade()["segments"]))
    cols, _ = load_snapshot(p)
    assert len(cols.trace) == 0
    assert cols.segments.total_size.tolist() == [4 * MIB, 2 * MIB]


def test_two_devices(snaps: dict[str, Path]) -> None:
    cols, _ = load_snapshot(snaps["two_devices"])
    assert sorted(set(cols.trace.device.tolist())) == [0, 1]
    assert sorted(set(cols.segments.device.tolist())) == [0, 1]


def test_codes_cover_every_documented_action() -> None:
    for a in (
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "oom",
        "snapshot",
    ):
        assert ACTION_CODE[a] != UNKNOWN


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda s: s["device_traces"].__setitem__(0, "x"), "not a list"),
        (lambda s: s["device_traces"][0][0].pop("action"), "no 'action'"),
        (lambda s: s["device_traces"][0][1].__setitem__("size", "big"), "non-integer"),
        (lambda s: s["segments"][0]["blocks"][0].__setitem__("state", "odd"), "unknown block"),
        (lambda s: s["segments"][0].pop("total_size"), "malformed"),
    ],
)
def test_malformed_snapshots(mutate: Any, needle: str, handmade: Handmade) -> None:
    snap = handmade()
    mutate(snap)
    with pytest.raises(KvscopeError, match=needle):
        to_columns(snap)
