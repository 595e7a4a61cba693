"""Columnar form of a snapshot: numpy arrays instead of millions of dicts.

:func:`to_columns` walks the raw snapshot once. Trace entries become parallel arrays (device,
action code, address, size, stream, ``time_us``, stack id, ``device_free``); segments and
blocks become two more tables; stack traces are interned (:mod:`kvscope.memtrace.intern`):
each distinct frame ``(filename, line, name)`` is stored once and each distinct stack once,
as a tuple of frame ids.

Only the stacks of ``alloc``, ``segment_alloc``, ``segment_map`` and ``oom`` entries are
interned (the questions asked of a snapshot are about who allocated); free entries get -1.

The walk's cost is bounded by the file's size however the pickle shares objects
(:mod:`kvscope.memtrace.intern`); values that only label things (file and function names,
actions, block states) are used only when they are strings, and cut to a bounded length.

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
from kvscope.memtrace.intern import MAX_NAME, Interner, budget, label

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


def _ints(values: Any, n: int, what: str) -> I64:
    try:
        return np.fromiter(values, np.int64, n)
    except (TypeError, ValueError, OverflowError) as err:
        raise KvscopeError(f"trace field '{what}' holds a non-integer value ({err}).") from None


#: Entries converted per step; each converted chunk is deleted from the raw list at once,
#: so the raw dicts are released while the columns grow and the peak stays near the size
#: of the unpickled object alone.
CHUNK = 1 << 18


def _actions(names: list[Any]) -> npt.NDArray[np.int8]:
    try:
        return np.fromiter(map(ACTION_CODE.get, names, repeat(UNKNOWN)), np.int8, len(names))
    except TypeError:  # an unhashable action (a list): not an action this version knows
        codes = (ACTION_CODE.get(a, UNKNOWN) if isinstance(a, str) else UNKNOWN for a in names)
        return np.fromiter(codes, np.int8, len(names))


def _chunk(entries: list[Any], dev: int, it: Interner, unknown: dict[str, int]) -> list[Any]:
    n = len(entries)
    it.charge(n)
    if n and not all(isinstance(e, dict) for e in (entries[0], entries[-1], entries[n // 2])):
        raise KvscopeError(
            f"device_traces[{dev}] holds non-dict entries: not a CUDA memory snapshot."
        )
    get = dict.get
    try:
        names = list(map(itemgetter("action"), entries))
    except (KeyError, TypeError):
        raise KvscopeError(f"device_traces[{dev}]: an entry has no 'action'.") from None
    action = _actions(names)
    for i in np.flatnonzero(action == UNKNOWN).tolist():
        name = label(names[i], f"<{type(names[i]).__name__}>")[:80]
        unknown[name] = unknown.get(name, 0) + 1
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
        dfree[oom] = _ints(
            (get(entries[i], "device_free", -1) for i in oom.tolist()), oom.size, "device_free"
        )
    cols.append(dfree)
    it.forget_lists()  # the caller may release this chunk's raw entries now
    return cols


def _trace(device_traces: list[Any], it: Interner, unknown: dict[str, int], consume: bool) -> Trace:
    parts: list[list[Any]] = []
    it.charge(len(device_traces))
    for dev, entries in enumerate(device_traces):
        if dev > np.iinfo(np.int16).max:
            raise KvscopeError("more than 32,767 device traces: not a CUDA memory snapshot.")
        if not isinstance(entries, list):
            raise KvscopeError(f"device_traces[{dev}] is not a list: not a CUDA memory snapshot.")
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


def _int(value: Any, default: int = 0) -> int:
    """An integer field (absent: ``default``); anything else is a malformed snapshot."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return int(value)


def _segment(si: int, s: Any, it: Interner, seg_rows: list[Any], blk_rows: list[Any]) -> bool:
    """Append segment ``si`` and its blocks to the row lists; True for legacy blocks."""
    legacy = False
    addr, total = _int(s["address"]), _int(s["total_size"])
    stype = s.get("segment_type", "large" if total > 2 * 1024 * 1024 else "small")
    seg_rows.append(
        (
            _int(s.get("device")),
            addr,
            total,
            _int(s.get("stream")),
            stype == "small",
            s.get("is_expandable") is True,
            it.stack(s.get("frames")),
        )
    )
    blocks = s["blocks"]
    if not isinstance(blocks, list):
        raise TypeError("'blocks' is not a list")
    it.charge(len(blocks))
    off = addr
    for b in blocks:
        size = _int(b["size"])
        state_name = b.get("state")
        state = STATE_CODE.get(state_name) if isinstance(state_name, str) else None
        if state is None:
            raise KvscopeError(f"segment {si}: unknown block state '{label(state_name)[:40]}'.")
        hist = b.get("history")
        if hist:  # legacy blocks: [{addr, real_size, frames}]
            legacy = True
            req, frames = _int(hist[0].get("real_size"), size), hist[0].get("frames")
        else:
            req, frames = _int(b.get("requested_size"), size), b.get("frames")
        if state == INACTIVE:
            req = 0
        baddr = _int(b.get("address"), off)
        blk_rows.append((si, baddr, size, req, state, it.stack(frames)))
        off = baddr + size
    return legacy


def _segments(raw_segments: Sequence[Any], it: Interner) -> tuple[Segments, bool]:
    seg_rows: list[tuple[int, int, int, int, bool, bool, int]] = []
    blk_rows: list[tuple[int, int, int, int, int, int]] = []
    legacy = False
    it.forget_lists()  # from here on every raw segment stays alive until the end
    it.charge(len(raw_segments))
    for si, s in enumerate(raw_segments):
        try:
            legacy |= _segment(si, s, it, seg_rows, blk_rows)
        except (KeyError, TypeError, ValueError, OverflowError, AttributeError, IndexError) as err:
            raise KvscopeError(
                f"segment {si} is malformed ({str(err)[:80] or type(err).__name__}): "
                "not a CUDA memory snapshot."
            ) from None
    try:
        sa = np.array(seg_rows, dtype=np.int64).reshape(-1, 7)
        ba = np.array(blk_rows, dtype=np.int64).reshape(-1, 6)
    except (OverflowError, ValueError):
        raise KvscopeError(
            "a segment or block field is beyond a 64-bit integer: not a CUDA memory snapshot."
        ) from None
    if ba.size and not ba[:, 2].min() >= 0:
        raise KvscopeError("a block has a negative size: not a CUDA memory snapshot.")
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


#: Allocator settings kept from a snapshot: scalars (and one level of dicts of scalars, as
#: ``roundup_power2_divisions``), at most this many keys: they are shown, never computed on.
MAX_SETTINGS = 64
_SCALARS = (str, int, float, bool, type(None))


def _settings(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    out: dict[str, Any] = {}
    for k, v in list(raw.items())[:MAX_SETTINGS]:
        if not isinstance(k, str):
            continue
        if isinstance(v, str):
            out[k[:80]] = v[:MAX_NAME]
        elif isinstance(v, _SCALARS):
            out[k[:80]] = v
        elif isinstance(v, dict):
            out[k[:80]] = {
                str(kk)[:80]: vv
                for kk, vv in list(v.items())[:MAX_SETTINGS]
                if isinstance(kk, str | int) and isinstance(vv, int | float | bool)
            }
    return out


def to_columns(raw: Any, consume: bool = False, file_bytes: int | None = None) -> SnapshotColumns:
    """Convert a loaded snapshot (dict, or legacy list of segments) into columns.

    With ``consume=True`` the trace lists of ``raw`` are emptied as they are converted, which
    keeps the peak memory near the size of ``raw`` alone (``load_snapshot`` does this).
    ``file_bytes``, the size of the file ``raw`` came from, bounds the elements walked (see
    the module docstring); without it the walk is not bounded."""
    if isinstance(raw, list):
        raw = {"segments": raw, "device_traces": []}
    if not isinstance(raw, dict):
        raise KvscopeError("not a CUDA memory snapshot (neither a dict nor a segment list).")
    it = Interner(budget(file_bytes))
    unknown: dict[str, int] = {}
    traces = raw.get("device_traces") or []
    if not isinstance(traces, list):
        raise KvscopeError("'device_traces' is not a list: not a CUDA memory snapshot.")
    trace = _trace(traces, it, unknown, consume)
    raw_segments = raw.get("segments") or []
    if not isinstance(raw_segments, list):
        raise KvscopeError("'segments' is not a list: not a CUDA memory snapshot.")
    segs, legacy = _segments(raw_segments, it)
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
    return SnapshotColumns(
        trace=trace,
        segments=segs,
        frames=Frames(it.frames, it.stacks),
        has_time=has_time,
        allocator_settings=_settings(raw.get("allocator_settings")),
        unknown_actions=unknown,
        legacy_blocks=legacy,
    )
