"""A columnar cache of analysed snapshots, so a second look at a big file takes < 1 s.

The cache lives in kvscope's cache directory: ``$KVSCOPE_CACHE_DIR`` if set, else
``$XDG_CACHE_HOME/kvscope``, else ``~/.cache/kvscope`` (the XDG base-directory rule), under
``memtrace/<key>/``. The key is a SHA-256 over the file's size, its modification time (ns)
and a SHA-256 of its content sampled at the start, middle and end (1 MiB each): hashing a
GB-sized file whole would itself take longer than the < 1 s budget, while any rewrite of a
snapshot changes its size or mtime, and the sampled hash catches a copy with a preserved
mtime but different bytes at the ends or middle.

Each array of :class:`~kvscope.memtrace.columns.SnapshotColumns` is one ``.npy`` file; frames,
stacks and settings are one JSON file; a hit maps the arrays read-only (``mmap_mode="r"``),
so the operating system's page cache serves them without a copy. An entry is written to a
temporary folder and renamed into place, so a reader never sees half of one.

An entry is never trusted: ``meta.json`` carries the format version, a CRC-32 of its own
content and, per array, its dtype, length and CRC-32 (zlib's runs at several GB/s, so the
check costs a fraction of the < 1 s). A hit is then checked for what the analyses index by:
equal column lengths, stack ids within the stacks, frame ids within the frames, block
segments within the segments, lifetime indices within the trace. Anything off and the entry
is discarded; the snapshot is read again and the entry rewritten.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from kvscope.memtrace.columns import (
    ACTIONS,
    Frames,
    Lifetimes,
    Segments,
    SnapshotColumns,
    Trace,
)

#: Bumped whenever the cached layout or the meaning of a column changes.
CACHE_FORMAT = 3
_SAMPLE = 1 << 20
_GROUPS: dict[str, type] = {
    "trace": Trace,
    "segments": Segments,
    "blocks": Lifetimes,
    "ranges": Lifetimes,
}


def cache_root() -> Path:
    """kvscope's cache directory (not created here)."""
    env = os.environ.get("KVSCOPE_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kvscope"


def file_key(path: Path) -> str:
    """The cache key of a snapshot file: size, mtime and a sampled content hash."""
    st = path.stat()
    h = hashlib.sha256()
    with path.open("rb") as f:
        for off in (0, max(st.st_size // 2 - _SAMPLE // 2, 0), max(st.st_size - _SAMPLE, 0)):
            f.seek(off)
            h.update(f.read(_SAMPLE))
    head = f"v{CACHE_FORMAT}:{st.st_size}:{st.st_mtime_ns}:{h.hexdigest()}"
    return hashlib.sha256(head.encode()).hexdigest()[:32]


def entry_dir(path: Path) -> Path:
    """Where the cache entry of ``path`` lives."""
    return cache_root() / "memtrace" / file_key(path)


def _crc(data: Any) -> int:
    return zlib.crc32(memoryview(data).cast("B")) if len(data) else 0


def _meta_crc(meta: dict[str, Any]) -> int:
    body = {k: v for k, v in meta.items() if k != "check"}
    return zlib.crc32(json.dumps(body, sort_keys=True, default=str).encode())


def save(path: Path, cols: SnapshotColumns) -> Path | None:
    """Store ``cols`` for ``path``; returns the entry folder, or None if it cannot be written
    (a read-only cache directory must not make an analysis fail)."""
    try:
        dest = entry_dir(path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=dest.parent))
        arrays: dict[str, Any] = {}
        for group in _GROUPS:
            obj = getattr(cols, group)
            if obj is None:
                continue
            for f in dataclasses.fields(obj):
                a = np.ascontiguousarray(getattr(obj, f.name))
                np.save(tmp / f"{group}.{f.name}.npy", a)
                arrays[f"{group}.{f.name}"] = {
                    "dtype": a.dtype.str,
                    "length": int(a.shape[0]),
                    "crc32": _crc(a),
                }
        meta: dict[str, Any] = {
            "format": CACHE_FORMAT,
            "source": str(path),
            "arrays": arrays,
            "frames": cols.frames.frames,
            "stacks": cols.frames.stacks,
            "has_time": cols.has_time,
            "allocator_settings": cols.allocator_settings,
            "unknown_actions": cols.unknown_actions,
            "legacy_blocks": cols.legacy_blocks,
        }
        meta = json.loads(json.dumps(meta, default=str))  # the form a reader will see
        meta["check"] = _meta_crc(meta)
        (tmp / "meta.json").write_text(json.dumps(meta))
        if dest.exists():
            shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
        return dest
    except (OSError, ValueError, TypeError, RecursionError):
        return None


class _Bad(Exception):
    """A cache entry that fails a check (caught in :func:`load`; the entry is discarded)."""


#: What reading a damaged entry can raise: a failed check, bad JSON or UTF-8 or a damaged
#: ``.npy`` header (ValueError), a missing file or field, a field of the wrong type.
_DAMAGED = (
    _Bad,
    OSError,
    ValueError,
    KeyError,
    TypeError,
    IndexError,
    AttributeError,
    RecursionError,
    MemoryError,
    OverflowError,
)


def load(path: Path) -> SnapshotColumns | None:
    """The cached columns of ``path``, or None when there is no entry or it fails a check
    (then the entry is removed, so it is rebuilt from the snapshot)."""
    try:
        d = entry_dir(path)
    except OSError:
        return None
    meta_file = d / "meta.json"
    if not meta_file.is_file():
        return None
    try:
        return _load(d, meta_file)
    except _DAMAGED:
        shutil.rmtree(d, ignore_errors=True)
        return None


def _load(d: Path, meta_file: Path) -> SnapshotColumns:
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    if not isinstance(meta, dict) or meta.get("format") != CACHE_FORMAT:
        raise _Bad("format")
    if meta.get("check") != _meta_crc(meta):
        raise _Bad("meta.json checksum")
    arrays = meta["arrays"]
    groups: dict[str, Any] = {}
    for group, cls in _GROUPS.items():
        names = [f.name for f in dataclasses.fields(cls)]
        if group in ("blocks", "ranges") and f"{group}.{names[0]}" not in arrays:
            groups[group] = None
            continue
        groups[group] = cls(**{n: _array(d, f"{group}.{n}", arrays) for n in names})
    frames = [(_s(a), _i(b), _s(c)) for a, b, c in meta["frames"]]
    stacks = [tuple(_i(x) for x in st) for st in meta["stacks"]]
    cols = SnapshotColumns(
        trace=groups["trace"],
        segments=groups["segments"],
        blocks=groups["blocks"],
        ranges=groups["ranges"],
        frames=Frames(frames, stacks),
        has_time=_b(meta["has_time"]),
        allocator_settings=dict(meta["allocator_settings"]),
        unknown_actions={_s(k): _i(v) for k, v in dict(meta["unknown_actions"]).items()},
        legacy_blocks=_b(meta["legacy_blocks"]),
    )
    check_columns(cols)
    return cols


def _array(d: Path, name: str, arrays: dict[str, Any]) -> Any:
    want = arrays[name]
    a = np.load(d / f"{name}.npy", mmap_mode="r", allow_pickle=False)
    if a.dtype.str != want["dtype"] or a.ndim != 1 or a.shape[0] != want["length"]:
        raise _Bad(f"{name}: dtype or length")
    if _crc(a) != want["crc32"]:
        raise _Bad(f"{name}: checksum")
    return a


def _s(v: Any) -> str:
    if not isinstance(v, str):
        raise _Bad("not a string")
    return v


def _i(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _Bad("not an integer")
    return v


def _b(v: Any) -> bool:
    if not isinstance(v, bool):
        raise _Bad("not a boolean")
    return v


def _within(a: Any, lo: int, hi: int, what: str) -> None:
    """Every value of ``a`` in [lo, hi) (an empty array passes)."""
    if len(a) and not (int(a.min()) >= lo and int(a.max()) < hi):
        raise _Bad(what)


def check_columns(cols: SnapshotColumns) -> None:
    """Raise :class:`_Bad` unless the columns index each other consistently."""
    tr, sg = cols.trace, cols.segments
    n = len(tr)
    if any(len(getattr(tr, f.name)) != n for f in dataclasses.fields(tr)):
        raise _Bad("trace columns differ in length")
    n_seg, n_blk = len(sg.address), len(sg.blk_address)
    for f in dataclasses.fields(sg):
        want = n_blk if f.name.startswith("blk_") else n_seg
        if len(getattr(sg, f.name)) != want:
            raise _Bad("segment columns differ in length")
    n_frames, n_stacks = len(cols.frames.frames), len(cols.frames.stacks)
    _within(tr.action, 0, len(ACTIONS), "trace action codes")
    _within(tr.device, 0, 1 << 15, "trace devices")
    for a in (tr.stack, sg.stack, sg.blk_stack):
        _within(a, -1, n_stacks, "stack ids")
    _within(sg.blk_segment, 0, n_seg, "block segments")
    _within(sg.blk_state, 0, 3, "block states")
    for st in cols.frames.stacks:
        if st and not (min(st) >= 0 and max(st) < n_frames):
            raise _Bad("frame ids")
    for lt in (cols.blocks, cols.ranges):
        if lt is None:
            continue
        if len(lt.open_idx) != len(lt.close_idx):
            raise _Bad("lifetime columns differ in length")
        _within(lt.open_idx, 0, n, "lifetime indices")
        _within(lt.close_idx, -1, n, "lifetime indices")
        _within(lt.pre_idx, 0, n, "lifetime indices")
