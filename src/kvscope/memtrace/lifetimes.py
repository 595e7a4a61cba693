"""Pairing trace events into lifetimes: which ``alloc`` a ``free_completed`` ends, which
``segment_alloc`` / ``segment_map`` a ``segment_free`` / ``segment_unmap`` ends.

Pairing is by (device, address) in trace order: a block's address is reused only after the
block was freed, so an opening event and the next closing event at the same address belong
together. A closing event with no opening before it ends something that existed before the
trace's first entry (the trace is a ring buffer of the last ``max_entries`` events). All of
it is vectorized: one ``lexsort`` over the events, no Python loop.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kvscope.memtrace.columns import (
    ALLOC,
    FREE_DONE,
    SEG_ALLOC,
    SEG_FREE,
    SEG_MAP,
    SEG_UNMAP,
    Lifetimes,
    SnapshotColumns,
    Trace,
)


def pair(trace: Trace, opens: tuple[int, ...], closes: tuple[int, ...]) -> Lifetimes:
    """Pair opening and closing actions by (device, address) in trace order."""
    ev = np.flatnonzero(np.isin(trace.action, opens + closes))  # already in trace order
    kind = np.isin(trace.action[ev], closes).astype(np.int8)
    # One sort key: the device in the top byte, the address below (GPU virtual addresses use
    # at most 49 bits). A stable sort keeps trace order among events at one address.
    key = trace.addr[ev] ^ (trace.device[ev].astype(np.int64) << 56)
    order = np.argsort(key, kind="stable")
    ev, kind, key = ev[order], kind[order], key[order]
    same = key[1:] == key[:-1]
    paired = same & (kind[:-1] == 0) & (kind[1:] == 1)
    close_of = np.full(ev.size, -1, np.int64)
    close_of[:-1][paired] = ev[1:][paired]
    is_open = kind == 0
    opened = np.zeros(ev.size, bool)
    opened[1:] = paired
    pre = ev[(kind == 1) & ~opened]
    open_idx = ev[is_open]
    close_idx = close_of[is_open]
    back = np.argsort(open_idx)
    return Lifetimes(open_idx[back], close_idx[back], np.sort(pre))


def block_lifetimes(trace: Trace) -> Lifetimes:
    """Tensor blocks: ``alloc`` ... ``free_completed``."""
    return pair(trace, (ALLOC,), (FREE_DONE,))


def segment_lifetimes(trace: Trace) -> Lifetimes:
    """Reserved ranges: ``segment_alloc``/``segment_map`` ... ``segment_free``/``segment_unmap``."""
    return pair(trace, (SEG_ALLOC, SEG_MAP), (SEG_FREE, SEG_UNMAP))


def with_lifetimes(cols: SnapshotColumns) -> SnapshotColumns:
    """``cols`` with both pairings computed (stored in the cache with the columns)."""
    if cols.blocks is not None and cols.ranges is not None:
        return cols
    return dataclasses.replace(
        cols, blocks=block_lifetimes(cols.trace), ranges=segment_lifetimes(cols.trace)
    )
