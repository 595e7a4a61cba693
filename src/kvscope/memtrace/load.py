"""Loading a snapshot file into columns, through the cache when it can.

:func:`load_snapshot` first looks for a cached columnar copy (:mod:`.cache`); otherwise it
unpickles the file safely (:mod:`.loader`), converts it (:mod:`.columns`), drops the raw
dicts, and stores the columns for next time.
"""

from __future__ import annotations

import gc
from pathlib import Path

from kvscope.errors import KvscopeError
from kvscope.memtrace import cache
from kvscope.memtrace.columns import SnapshotColumns, to_columns
from kvscope.memtrace.lifetimes import with_lifetimes
from kvscope.memtrace.loader import check_snapshot_path, load_raw


def load_snapshot(path: str | Path, use_cache: bool = True) -> tuple[SnapshotColumns, bool]:
    """Return ``(columns, from_cache)`` for the snapshot at ``path``."""
    p = Path(path)
    check_snapshot_path(p)
    if use_cache:
        hit = cache.load(p)
        if hit is not None:
            return hit, True
    # The raw object holds millions of small dicts; the cyclic GC would scan them again
    # and again while they are built, for nothing (they hold no cycles).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        raw = load_raw(p)
        try:
            cols = to_columns(raw, consume=True, file_bytes=p.stat().st_size)
        except KvscopeError as err:
            raise KvscopeError(f"{p}: {err.message}", err.hint) from None
        except RecursionError:
            raise KvscopeError(f"{p}: not a CUDA memory snapshot (nested too deeply).") from None
        del raw
        cols = with_lifetimes(cols)
    finally:
        if was_enabled:
            gc.enable()
    if use_cache:
        cache.save(p, cols)
    return cols, False
