"""Hostile and damaged inputs to the snapshot loader: one KvscopeError line, bounded time.

Covers issue #20 for memtrace: a BUILD-opcode pickle, random and truncated pickles (fuzzed),
a snapshot whose entries all share one huge frames list through pickle memo references, and
damaged cache entries (discarded and rebuilt, never trusted).
"""

from __future__ import annotations

import json
import pickle
import shutil
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.memtrace import cache
from kvscope.memtrace.analysis import analyze
from kvscope.memtrace.load import load_snapshot

# protocol 4 header, push None, empty dict, BUILD, STOP: the C unpickler asks None for a
# __dict__ (AttributeError), nothing is imported or run
BUILD_ON_NONE = b"\x80\x04N}\x94b."
BUILD_ON_DICT = b"\x80\x04}\x94}b."


@pytest.mark.parametrize("payload", [BUILD_ON_NONE, BUILD_ON_DICT])
def test_build_opcode_pickle_is_one_line(payload: bytes, tmp_path: Path) -> None:
    p = tmp_path / "build.pickle"
    p.write_bytes(payload)
    with pytest.raises(KvscopeError) as err:
        load_snapshot(p)
    line = err.value.one_line()
    assert "not a CUDA memory snapshot" in line
    assert "\n" not in line


def test_a_directory_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(KvscopeError, match="is a directory"):
        load_snapshot(tmp_path)


def _mutations(data: bytes) -> st.SearchStrategy[bytes]:
    cut = st.integers(0, len(data)).map(lambda n: data[:n])
    flipped = st.tuples(st.integers(0, len(data) - 1), st.integers(0, 255)).map(
        lambda ib: data[: ib[0]] + bytes([ib[1]]) + data[ib[0] + 1 :]
    )
    spliced = st.tuples(st.integers(0, len(data)), st.binary(max_size=16)).map(
        lambda ix: data[: ix[0]] + ix[1] + data[ix[0] :]
    )
    header = st.binary(max_size=64).map(lambda b: b"\x80\x04" + b)
    return st.one_of(cut, flipped, spliced, header, st.binary(max_size=64))


_SMALL = pickle.dumps(
    {
        "segments": [
            {
                "device": 0,
                "address": 4096,
                "total_size": 2 << 20,
                "stream": 0,
                "segment_type": "large",
                "blocks": [
                    {
                        "address": 4096,
                        "size": 1 << 20,
                        "requested_size": 1000,
                        "state": "active_allocated",
                        "frames": [{"filename": "a.py", "line": 3, "name": "f"}],
                    },
                    {"address": 4096 + (1 << 20), "size": 1 << 20, "state": "inactive"},
                ],
            }
        ],
        "device_traces": [
            [
                {
                    "action": "segment_alloc",
                    "addr": 4096,
                    "size": 2 << 20,
                    "stream": 0,
                    "time_us": 1,
                    "frames": [],
                },
                {
                    "action": "alloc",
                    "addr": 4096,
                    "size": 1 << 20,
                    "stream": 0,
                    "time_us": 2,
                    "frames": [{"filename": "a.py", "line": 3, "name": "f"}],
                },
                {
                    "action": "oom",
                    "addr": 0,
                    "size": 8 << 20,
                    "stream": 0,
                    "time_us": 3,
                    "device_free": 0,
                    "frames": [],
                },
            ]
        ],
        "allocator_settings": {"expandable_segments": False},
    },
    protocol=4,
)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(payload=_mutations(_SMALL))
def test_random_and_truncated_pickles_only_raise_kvscope_error(
    payload: bytes, tmp_path: Path
) -> None:
    p = tmp_path / "fuzz.pickle"
    p.write_bytes(payload)
    try:
        cols, _ = load_snapshot(p, use_cache=False)
    except KvscopeError as err:
        assert "\n" not in err.one_line()
        return
    analyze(cols)  # whatever loads must also analyse without a traceback


def _memo_bomb(entries: int, frames: int = 20_000) -> dict[str, Any]:
    """Every trace entry and block shares one frames list: pickle writes it once."""
    shared = [{"filename": "f.py", "line": i, "name": "fn"} for i in range(frames)]
    trace = [
        {
            "action": "alloc",
            "addr": 4096 * i,
            "size": 512,
            "stream": 0,
            "time_us": i,
            "frames": shared,
        }
        for i in range(entries)
    ]
    blocks = [
        {
            "address": 4096 * i,
            "size": 512,
            "requested_size": 512,
            "state": "active_allocated",
            "frames": shared,
        }
        for i in range(entries)
    ]
    seg = {
        "device": 0,
        "address": 0,
        "total_size": 4096 * entries,
        "stream": 0,
        "segment_type": "large",
        "blocks": blocks,
        "frames": shared,
    }
    return {"segments": [seg], "device_traces": [trace]}


def test_shared_frames_list_costs_once(tmp_path: Path) -> None:
    p = tmp_path / "bomb.pickle"
    p.write_bytes(pickle.dumps(_memo_bomb(6_000), protocol=4))
    assert p.stat().st_size < 900_000
    t0 = time.perf_counter()
    cols, _ = load_snapshot(p, use_cache=False)
    elapsed = time.perf_counter() - t0
    assert len(cols.trace) == 6_000
    assert len(cols.frames.stacks) == 1 and len(cols.frames.stacks[0]) == 20_000
    assert elapsed < 2.0, f"{elapsed:.1f} s"


def test_repeated_containers_are_refused_quickly(tmp_path: Path) -> None:
    # one 4,000-block segment listed 2,000 times: 8e6 blocks from a 100 KB file
    blocks = [{"size": 512, "state": "inactive"} for _ in range(4_000)]
    seg = {"address": 0, "total_size": 512 * 4_000, "blocks": blocks}
    p = tmp_path / "segs.pickle"
    p.write_bytes(pickle.dumps({"segments": [seg] * 2_000, "device_traces": []}))
    t0 = time.perf_counter()
    with pytest.raises(KvscopeError, match="refers back to shared data"):
        load_snapshot(p, use_cache=False)
    assert time.perf_counter() - t0 < 2.0


# ------------------------------------------------------------------ damaged cache entries


def _entry(p: Path) -> Path:
    load_snapshot(p)
    d = cache.entry_dir(p)
    assert (d / "meta.json").is_file()
    return d


def _rewrite_meta(d: Path, edit: Any) -> None:
    """Edit meta.json and fix up its checksums, as a consistent but wrong entry would be."""
    meta = json.loads((d / "meta.json").read_text())
    edit(meta)
    if "check" in meta:
        meta["check"] = cache._meta_crc(meta)
    (d / "meta.json").write_text(json.dumps(meta))


def _fix_crc(meta: dict[str, Any], name: str, a: np.ndarray) -> None:
    if "arrays" in meta:
        meta["arrays"][name].update(length=len(a), crc32=zlib.crc32(a.tobytes()))


def _out_of_range_stacks(d: Path) -> None:
    # a consistent-looking entry (checksums fixed up) whose stack ids point past the stacks
    a = np.load(d / "trace.stack.npy")
    a[:] = 10**6
    np.save(d / "trace.stack.npy", a)

    _rewrite_meta(d, lambda meta: _fix_crc(meta, "trace.stack", a))


def _short_column(d: Path) -> None:
    a = np.load(d / "trace.addr.npy")[:-3]
    np.save(d / "trace.addr.npy", a)

    _rewrite_meta(d, lambda meta: _fix_crc(meta, "trace.addr", a))


def _flipped_byte(d: Path) -> None:
    f = d / "trace.size.npy"
    raw = bytearray(f.read_bytes())
    raw[-5] ^= 0xFF
    f.write_bytes(bytes(raw))


def _truncated_npy(d: Path) -> None:
    f = d / "segments.blk_size.npy"
    f.write_bytes(f.read_bytes()[:20])


def _garbage_meta(d: Path) -> None:
    (d / "meta.json").write_bytes(b"\xff\xfe{not json")


def _frames_not_triples(d: Path) -> None:
    _rewrite_meta(d, lambda meta: meta.update(frames=[[1]] * len(meta["frames"])))


@pytest.mark.parametrize(
    "damage",
    [
        _out_of_range_stacks,
        _short_column,
        _flipped_byte,
        _truncated_npy,
        _garbage_meta,
        _frames_not_triples,
    ],
)
def test_damaged_cache_entry_is_rebuilt(
    damage: Any, snaps: dict[str, Path], tmp_path: Path
) -> None:
    p = tmp_path / "s.pickle"
    shutil.copy(snaps["leak"], p)
    expected = analyze(load_snapshot(p, use_cache=False)[0])
    damage(_entry(p))
    cols, hit = load_snapshot(p)
    assert not hit  # the bad entry was not used
    assert analyze(cols) == expected
    again, hit = load_snapshot(p)  # ... and was rewritten
    assert hit and analyze(again) == expected
