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
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from kvscope.memtrace.columns import Frames, Lifetimes, Segments, SnapshotColumns, Trace

#: Bumped whenever the cached layout or the meaning of a column changes.
CACHE_FORMAT = 2
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


def save(path: Path, cols: SnapshotColumns) -> Path | None:
    """Store ``cols`` for ``path``; returns the entry folder, or None if it cannot be written
    (a read-only cache directory must not make an analysis fail)."""
    dest = entry_dir(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=dest.parent))
        for group in _GROUPS:
            obj = getattr(cols, group)
            if obj is None:
                continue
            for f in dataclasses.fields(obj):
                np.save(tmp / f"{group}.{f.name}.npy", getattr(obj, f.name))
        meta: dict[str, Any] = {
            "format": CACHE_FORMAT,
            "source": str(path),
            "frames": cols.frames.frames,
            "stacks": cols.frames.stacks,
            "has_time": cols.has_time,
            "allocator_settings": cols.allocator_settings,
            "unknown_actions": cols.unknown_actions,
            "legacy_blocks": cols.legacy_blocks,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, default=str))
        if dest.exists():
            shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
        return dest
    except OSError:
        return None


def load(path: Path) -> SnapshotColumns | None:
    """The cached columns of ``path``, or None when there is no valid entry."""
    d = entry_dir(path)
    meta_file = d / "meta.json"
    if not meta_file.is_file():
        return None
    try:
        meta = json.loads(meta_file.read_text())
        if meta.get("format") != CACHE_FORMAT:
            return None
        groups: dict[str, Any] = {}
        for group, cls in _GROUPS.items():
            names = [f.name for f in dataclasses.fields(cls)]
            if group in ("blocks", "ranges") and not (d / f"{group}.{names[0]}.npy").is_file():
                groups[group] = None
                continue
            groups[group] = cls(
                **{n: np.load(d / f"{group}.{n}.npy", mmap_mode="r") for n in names}
            )
        return SnapshotColumns(
            trace=groups["trace"],
            segments=groups["segments"],
            blocks=groups["blocks"],
            ranges=groups["ranges"],
            frames=Frames(
                [(str(a), int(b), str(c)) for a, b, c in meta["frames"]],
                [tuple(s) for s in meta["stacks"]],
            ),
            has_time=bool(meta["has_time"]),
            allocator_settings=dict(meta["allocator_settings"]),
            unknown_actions=dict(meta["unknown_actions"]),
            legacy_blocks=bool(meta["legacy_blocks"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
