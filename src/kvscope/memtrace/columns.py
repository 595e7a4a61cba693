"""Columnar form of a snapshot: numpy arrays instead of millions of dicts.

:func:`to_columns` walks the raw snapshot once. Trace entries become parallel arrays (device,
action code, address, size, stream, ``time_us``, stack id, ``device_free``); segments and
blocks become two more tables; stack traces are interned: each distinct frame
``(filename, line, name)`` is stored once and each distinct stack once, as a tuple of frame
ids. Interning keys on object identity first, because the producer (``py_symbolize`` in
``torch/csrc/profiler/python/combined_traceback.cpp``) shares frame dicts, so the pickle
hands back the same dict object for a repeated frame.

Only the stacks of ``alloc``, ``segment_alloc``, ``segment_map`` and ``oom`` entries are
interned (the questions asked of a snapshot are about who allocated); free entries get -1.

Format details follow ``torch/cuda/memory.py`` (``_snapshot`` docstring) and
``torch/cuda/_memory_viz.py`` (legacy ``history`` blocks, bare segment lists).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from kvscope.errors import KvscopeError

I64 = npt.NDArray[np.int64]

#: Trace actions in code order; the last code stands for any action this version does not know.
ACTIONS: tuple[str, ...] = (
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "oom",
    "snapshot",
    "unknown",
)
ACTION_CODE: dict[str, int] = {a: i for i, a in enumerate(ACTIONS)}
(ALLOC, FREE_REQ, FREE_DONE, SEG_ALLOC, SEG_FREE, SEG_MAP, SEG_UNMAP, OOM, SNAP, UNKNOWN) = range(
    len(ACTIONS)
)
_STACKED = (ALLOC, SEG_ALLOC, SEG_MAP, OOM)

#: Block states; the C++ producer writes ``active_pending_free``, the Python docstring of
#: ``torch.cuda.memory._snapshot`` says ``active_awaiting_free``: both map to code 2.
INACTIVE, ACTIVE, PENDING_FREE = 0, 1, 2
STATE_CODE: dict[str, int] = {
    "inactive": INACTIVE,
    "active_allocated": ACTIVE,
    "active_pending_free": PENDING_FREE,
    "active_awaiting_free": PENDING_FREE,
}


@dataclass(frozen=True)
class Frames:
    """Interned frames and stacks. A stack is a tuple of frame ids, innermost frame first."""

    frames: list[tuple[str, int, str]]
    stacks: list[tuple[int, ...]]


@dataclass(frozen=True)
class Trace:
    """All devices' trace entries, device by device, each device in recorded order."""

    device: npt.NDArray[np.int16]
    action: npt.NDArray[np.int8]
    addr: I64
    size: I64
    stream: I64
    time_us: I64
    stack: npt.NDArray[np.int32]
    device_free: I64

    def __len__(self) -> int:
        return int(self.action.shape[0])


@dataclass(frozen=True)
class Segments:
    """End-state segments (one row each) and their blocks (one row each, address order)."""

    device: I64
    address: I64
    total_size: I64
    stream: I64
    is_small: npt.NDArray[np.bool_]
    is_expandable: npt.NDArray[np.bool_]
    stack: npt.NDArray[np.int32]
    blk_segment: npt.NDArray[np.int32]
    blk_address: I64
    blk_size: I64
    blk_requested: I64
    blk_state: npt.NDArray[np.int8]
    blk_stack: npt.NDArray[np.int32]


@dataclass(frozen=True)
class Lifetimes:
    """``open_idx[i]`` is an opening entry and ``close_idx[i]`` the entry that ended it, or -1
    when it was still live at the end. ``pre_idx`` are closings of things older than the
    trace (each ended at that entry). Built by :mod:`kvscope.memtrace.lifetimes`."""

    open_idx: I64
    close_idx: I64
    pre_idx: I64


@dataclass(frozen=True)
class SnapshotColumns:
    """A whole snapshot in columns. ``has_time`` is False for files without ``time_us``
    (old versions); ``time_us`` then holds the entry index."""

    trace: Trace
    segments: Segments
    frames: Frames
    has_time: bool
    allocator_settings: dict[str, Any] = field(default_factory=dict)
    unknown_actions: dict[str, int] = field(default_factory=dict)
    legacy_blocks: bool = False
    #: tensor blocks (alloc .. free_completed) and reserved ranges paired; None until
    #: :func:`kvscope.memtrace.lifetimes.with_lifetimes` fills them (cached with the columns)
    blocks: Lifetimes | None = None
    ranges: Lifetimes | None = None


class _Interner:
    def __init__(self) -> None:
        self.frames: list[tuple[str, int, str]] = []
        self.stacks: list[tuple[int, ...]] = []
        self._frame_by_id: dict[int, int] = {}
        self._frame_by_value: dict[tuple[str, int, str], int] = {}
        self._stack_by_ids: dict[tuple[int, ...], int] = {}
        self._stack_by_value: dict[tuple[int, ...], int] = {}
        # Keys use id(); holding each frame object keeps its id from being reused when the
        # raw trace is released chunk by chunk.
        self._alive: list[Any] = []

    def frame(self, f: Any) -> int:
        fid = self._frame_by_id.get(id(f))
        if fid is None:
            if not isinstance(f, dict):
                raise KvscopeError("a stack frame is not a dict: not a memory snapshot.")
            key = (str(f.get("filename", "?")), int(f.get("line", 0) or 0), str(f.get("name", "?")))
            fid = self._frame_by_value.get(key)
            if fid is None:
                fid = self._frame_by_value[key] = len(self.frames)
                self.frames.append(key)
            self._frame_by_id[id(f)] = fid
            self._alive.append(f)
        return fid

    def stack(self, frames: Any) -> int:
        if not frames:
            return -1
        ids = tuple(map(id, frames))
        sid = self._stack_by_ids.get(ids)
        if sid is None:
            value = tuple(map(self.frame, frames))
            sid = self._stack_by_value.get(value)
            if sid is None:
                sid = self._stack_by_value[value] = len(self.stacks)
                self.stacks.append(value)
            self._stack_by_ids[ids] = sid
        return sid


def _ints(values: Any, n: int, what: str) -> I64:
    try:
        return np.fromiter(values, np.int64, n)
    except (TypeError, ValueError, OverflowError) as err:
        raise KvscopeError(f"trace field '{what}' holds a non-integer value ({err}).") from None


#: Entries converted per step; each converted chunk is deleted from the raw list at once,
#: so the raw dicts are released while the columns grow and the peak stays near the size
#: of the unpickled object alone.
CHUNK = 1 << 18


def _chunk(entries: list[Any], dev: int, it: _Interner, unknown: dict[str, int]) -> list[Any]:
    n = len(entries)
    if n and not all(isinstance(e, dict) for e in (entries[0], entries[-1], entries[n // 2])):
        raise KvscopeError(f"device_traces[{dev}] holds non-dict entries: not a memory snapshot.")
    get = dict.get
    try:
        names = list(map(itemgetter("action"), entries))
    except (KeyError, TypeError):
        raise KvscopeError(f"device_traces[{dev}]: an entry has no 'action'.") from None
    action = np.fromiter(map(ACTION_CODE.get, names, repeat(UNKNOWN)), np.int8, n)
    for i in np.flatnonzero(action == UNKNOWN).tolist():
        unknown[str(names[i])] = unknown.get(str(names[i]), 0) + 1
    del names
    cols = [
        np.full(n, dev, np.int16),
        action,
        _ints(map(get, entries, repeat("addr"), repeat(0)), n, "addr"),
        _ints(map(get, entries, repeat("size"), repeat(0)), n, "size"),
        _ints(map(get, entries, repeat("stream"), repeat(0)), n, "stream"),
        _ints(map(get, entries, repeat("time_us"), repeat(-1)), n, "time_us"),
    ]
    stack = np.full(n, -1, np.int32)
    idx = np.flatnonzero(np.isin(action, _STACKED))
    if idx.size:
        frames = [get(entries[i], "frames") for i in idx.tolist()]
        stack[idx] = np.fromiter(map(it.stack, frames), np.int32, idx.size)
    cols.append(stack)
    dfree = np.full(n, -1, np.int64)
    oom = np.flatnonzero(action == OOM)
    if oom.size:
        dfree[oom] = [int(get(entries[i], "device_free", -1)) for i in oom.tolist()]
    cols.append(dfree)
    return cols


def _trace(
    device_traces: list[Any], it: _Interner, unknown: dict[str, int], consume: bool
) -> Trace:
    parts: list[list[Any]] = []
    for dev, entries in enumerate(device_traces):
        if not isinstance(entries, list):
            raise KvscopeError(f"device_traces[{dev}] is not a list: not a memory snapshot.")
        if consume:
            while entries:
                parts.append(_chunk(entries[:CHUNK], dev, it, unknown))
                del entries[:CHUNK]
        else:
            for a in range(0, len(entries), CHUNK):
                parts.append(_chunk(entries[a : a + CHUNK], dev, it, unknown))
    if not parts:
        e = np.zeros(0, np.int64)
        return Trace(e.astype(np.int16), e.astype(np.int8), e, e, e, e, e.astype(np.int32), e)
    if len(parts) == 1:
        return Trace(*parts[0])
    cols = []
    for k in range(8):  # concatenate one column at a time and drop its chunks at once
        cols.append(np.concatenate([p[k] for p in parts]))
        for p in parts:
            p[k] = None
    return Trace(*cols)


def _segments(raw_segments: Sequence[Any], it: _Interner) -> tuple[Segments, bool]:
    seg_rows: list[tuple[int, int, int, int, bool, bool, int]] = []
    blk_rows: list[tuple[int, int, int, int, int, int]] = []
    legacy = False
    for si, s in enumerate(raw_segments):
        try:
            addr, total = int(s["address"]), int(s["total_size"])
            stype = s.get("segment_type", "large" if total > 2 * 1024 * 1024 else "small")
            seg_rows.append(
                (
                    int(s.get("device", 0)),
                    addr,
                    total,
                    int(s.get("stream", 0)),
                    stype == "small",
                    bool(s.get("is_expandable", False)),
                    it.stack(s.get("frames")),
                )
            )
            off = addr
            for b in s["blocks"]:
                size = int(b["size"])
                state = STATE_CODE.get(str(b.get("state")))
                if state is None:
                    raise KvscopeError(f"segment {si}: unknown block state '{b.get('state')}'.")
                hist = b.get("history")
                if hist:  # legacy blocks: [{addr, real_size, frames}]
                    legacy = True
                    req, frames = int(hist[0].get("real_size", size)), hist[0].get("frames")
                else:
                    req, frames = int(b.get("requested_size", size)), b.get("frames")
                if state == INACTIVE:
                    req = 0
                baddr = int(b.get("address", off))
                blk_rows.append((si, baddr, size, req, state, it.stack(frames)))
                off = baddr + size
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise KvscopeError(
                f"segment {si} is malformed ({err!r}): not a memory snapshot."
            ) from None
    sa = np.array(seg_rows, dtype=np.int64).reshape(-1, 7)
    ba = np.array(blk_rows, dtype=np.int64).reshape(-1, 6)
    segs = Segments(
        device=sa[:, 0].copy(),
        address=sa[:, 1].copy(),
        total_size=sa[:, 2].copy(),
        stream=sa[:, 3].copy(),
        is_small=sa[:, 4].astype(bool),
        is_expandable=sa[:, 5].astype(bool),
        stack=sa[:, 6].astype(np.int32),
        blk_segment=ba[:, 0].astype(np.int32),
        blk_address=ba[:, 1].copy(),
        blk_size=ba[:, 2].copy(),
        blk_requested=ba[:, 3].copy(),
        blk_state=ba[:, 4].astype(np.int8),
        blk_stack=ba[:, 5].astype(np.int32),
    )
    return segs, legacy


def to_columns(raw: Any, consume: bool = False) -> SnapshotColumns:
    """Convert a loaded snapshot (dict, or legacy list of segments) into columns.

    With ``consume=True`` the trace lists of ``raw`` are emptied as they are converted, which
    keeps the peak memory near the size of ``raw`` alone (``load_snapshot`` does this)."""
    if isinstance(raw, list):
        raw = {"segments": raw, "device_traces": []}
    it = _Interner()
    unknown: dict[str, int] = {}
    traces = raw.get("device_traces") or []
    if not isinstance(traces, list):
        raise KvscopeError("'device_traces' is not a list: not a memory snapshot.")
    trace = _trace(traces, it, unknown, consume)
    segs, legacy = _segments(raw.get("segments") or [], it)
    t = trace.time_us
    has_time = bool(t.size) and bool((t >= 0).any())
    if not has_time:
        t[:] = np.arange(t.size)
    elif (t < 0).any():  # a few entries without time: carry the last known time forward
        known = np.where(t >= 0, np.arange(t.size), 0)
        np.maximum.accumulate(known, out=known)
        first = int(np.flatnonzero(t >= 0)[0])
        filled = t[known]
        filled[:first] = t[first]
        t[:] = filled
    settings = raw.get("allocator_settings")
    return SnapshotColumns(
        trace=trace,
        segments=segs,
        frames=Frames(it.frames, it.stacks),
        has_time=has_time,
        allocator_settings=dict(settings) if isinstance(settings, dict) else {},
        unknown_actions=unknown,
        legacy_blocks=legacy,
    )
