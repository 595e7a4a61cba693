"""External fragmentation and internal waste, at the end and over time.

Definitions (LLNL Umpire ``relative_fragmentation`` and ``torch/cuda/_memory_viz.py``
``segsum``):

- *external fragmentation* = ``1 - largest_free_block / total_free``, where the free blocks
  are the ``inactive`` blocks inside reserved memory. It is 0 when all free memory is one
  block and tends to 1 when it is scattered in small holes. Free blocks of different segments
  cannot merge, so the largest free block is a per-segment maximum.
- *internal waste* = ``size - requested_size`` summed over active blocks (rounding slack).
- the root-sum-square metric ``1 - sqrt(sum f_i^2) / sum f_i`` (Sawicki) is reported too.

The end state comes straight from the snapshot's segments and blocks (exact). The time
course replays the trace: at a sample entry the live reserved ranges and live blocks are
known from :mod:`kvscope.memtrace.lifetimes`, and the free blocks are the gaps between live
blocks inside live ranges. Blocks allocated in the trace are sized by the allocator's
512-byte rounding (an unsplit remainder then counts as free: the course is an estimate,
the end state is exact).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kvscope.memtrace.caching_allocator import K_MIN_BLOCK
from kvscope.memtrace.columns import (
    ACTIVE,
    INACTIVE,
    PENDING_FREE,
    SEG_MAP,
    SEG_UNMAP,
    SnapshotColumns,
)
from kvscope.memtrace.lifetimes import with_lifetimes

I64 = npt.NDArray[np.int64]
_NEVER = np.iinfo(np.int64).max


def _ratio(largest: int, total: int) -> float:
    return 0.0 if total <= 0 else 1.0 - largest / total


@dataclass(frozen=True)
class SegmentFrag:
    """One end-state segment. Sizes in bytes."""

    device: int
    address: int
    total_bytes: int
    pool: str
    stream: int
    is_expandable: bool
    allocated_bytes: int
    pending_free_bytes: int
    free_bytes: int
    largest_free_bytes: int
    internal_waste_bytes: int
    external_frag: float


@dataclass(frozen=True)
class FragSummary:
    """Totals over a set of segments (overall, or one device/pool)."""

    scope: str
    reserved_bytes: int
    allocated_bytes: int
    pending_free_bytes: int
    free_bytes: int
    largest_free_bytes: int
    internal_waste_bytes: int
    external_frag: float
    rss_frag: float


def segment_table(cols: SnapshotColumns) -> list[SegmentFrag]:
    """Per-segment figures of the end state."""
    sg = cols.segments
    n = sg.address.size
    seg = sg.blk_segment
    size, st = sg.blk_size, sg.blk_state
    alloc = np.bincount(seg, weights=np.where(st == ACTIVE, size, 0), minlength=n)
    pend = np.bincount(seg, weights=np.where(st == PENDING_FREE, size, 0), minlength=n)
    free = np.bincount(seg, weights=np.where(st == INACTIVE, size, 0), minlength=n)
    waste = np.bincount(
        seg, weights=np.where(st == ACTIVE, size - sg.blk_requested, 0), minlength=n
    )
    largest = np.zeros(n, np.int64)
    np.maximum.at(largest, seg, np.where(st == INACTIVE, size, 0))
    return [
        SegmentFrag(
            device=int(sg.device[i]),
            address=int(sg.address[i]),
            total_bytes=int(sg.total_size[i]),
            pool="small" if sg.is_small[i] else "large",
            stream=int(sg.stream[i]),
            is_expandable=bool(sg.is_expandable[i]),
            allocated_bytes=int(alloc[i]),
            pending_free_bytes=int(pend[i]),
            free_bytes=int(free[i]),
            largest_free_bytes=int(largest[i]),
            internal_waste_bytes=int(waste[i]),
            external_frag=_ratio(int(largest[i]), int(free[i])),
        )
        for i in range(n)
    ]


def summarize(cols: SnapshotColumns, rows: list[SegmentFrag]) -> list[FragSummary]:
    """Overall totals, then one row per (device, pool, stream) that has segments (the
    default stream 0 is left out of the name)."""
    sg = cols.segments
    free_blk = sg.blk_state == INACTIVE
    groups: dict[str, list[int]] = {"all": list(range(len(rows)))}
    for i, r in enumerate(rows):
        # free blocks never move between devices, pools or streams: one row per combination
        stream = f"/stream{r.stream:#x}" if r.stream else ""
        groups.setdefault(f"device{r.device}/{r.pool}{stream}", []).append(i)
    out = []
    for scope, idx in groups.items():
        rs = [rows[i] for i in idx]
        free = sum(r.free_bytes for r in rs)
        largest = max((r.largest_free_bytes for r in rs), default=0)
        f = sg.blk_size[free_blk & np.isin(sg.blk_segment, idx)].astype(np.float64)
        rss = 0.0 if free == 0 else 1.0 - float(np.sqrt((f**2).sum())) / free
        out.append(
            FragSummary(
                scope=scope,
                reserved_bytes=sum(r.total_bytes for r in rs),
                allocated_bytes=sum(r.allocated_bytes for r in rs),
                pending_free_bytes=sum(r.pending_free_bytes for r in rs),
                free_bytes=free,
                largest_free_bytes=largest,
                internal_waste_bytes=sum(r.internal_waste_bytes for r in rs),
                external_frag=_ratio(largest, free),
                rss_frag=rss,
            )
        )
    return out


@dataclass(frozen=True)
class FreeSpace:
    """Free space inside reserved memory just after one trace entry (an estimate)."""

    entry: int
    device: int
    reserved_bytes: int
    free_bytes: int
    largest_free_bytes: int
    external_frag: float


class Replay:
    """Live ranges and blocks at any trace entry, from the trace plus the end state."""

    def __init__(self, cols: SnapshotColumns) -> None:
        cols = with_lifetimes(cols)
        tr, sg = cols.trace, cols.segments
        bl, sl = cols.blocks, cols.ranges
        assert bl is not None and sl is not None
        live_state = sg.blk_state != INACTIVE
        end_blk_addr = sg.blk_address[live_state]
        end_blk_size = sg.blk_size[live_state]
        end_blk_dev = sg.device[sg.blk_segment[live_state]]
        traced_live = bl.open_idx[bl.close_idx < 0]
        old_blk = ~_isin2(end_blk_dev, end_blk_addr, tr.device[traced_live], tr.addr[traced_live])
        rounded = -(-tr.size // K_MIN_BLOCK) * K_MIN_BLOCK
        self.b_open = np.concatenate(
            [bl.open_idx, np.full(bl.pre_idx.size + int(old_blk.sum()), -1)]
        )
        self.b_close = np.concatenate(
            [
                np.where(bl.close_idx < 0, _NEVER, bl.close_idx),
                bl.pre_idx,
                np.full(int(old_blk.sum()), _NEVER),
            ]
        )
        self.b_dev = np.concatenate(
            [tr.device[bl.open_idx], tr.device[bl.pre_idx], end_blk_dev[old_blk]]
        )
        self.b_addr = np.concatenate(
            [tr.addr[bl.open_idx], tr.addr[bl.pre_idx], end_blk_addr[old_blk]]
        )
        self.b_size = np.concatenate(
            [rounded[bl.open_idx], rounded[bl.pre_idx], end_blk_size[old_blk]]
        )
        traced_seg = sl.open_idx[sl.close_idx < 0]
        old_seg = ~_isin2(sg.device, sg.address, tr.device[traced_seg], tr.addr[traced_seg])
        self.s_open = np.concatenate(
            [sl.open_idx, np.full(sl.pre_idx.size + int(old_seg.sum()), -1)]
        )
        self.s_close = np.concatenate(
            [
                np.where(sl.close_idx < 0, _NEVER, sl.close_idx),
                sl.pre_idx,
                np.full(int(old_seg.sum()), _NEVER),
            ]
        )
        self.s_dev = np.concatenate(
            [tr.device[sl.open_idx], tr.device[sl.pre_idx], sg.device[old_seg]]
        )
        self.s_addr = np.concatenate(
            [tr.addr[sl.open_idx], tr.addr[sl.pre_idx], sg.address[old_seg]]
        )
        self.s_size = np.concatenate(
            [tr.size[sl.open_idx], tr.size[sl.pre_idx], sg.total_size[old_seg]]
        )
        # ranges of an expandable segment (segment_map) merge with their mapped neighbours
        self.s_merge = np.concatenate(
            [
                tr.action[sl.open_idx] == SEG_MAP,
                tr.action[sl.pre_idx] == SEG_UNMAP,
                sg.is_expandable[old_seg],
            ]
        )

        self._by_dev: dict[int, tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]] = {}

    def _masks(self, device: int) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        if device not in self._by_dev:
            self._by_dev[device] = (self.s_dev == device, self.b_dev == device)
        return self._by_dev[device]

    def at(self, entry: int, device: int) -> FreeSpace:
        """Free space on ``device`` just after trace entry ``entry``."""
        return self.at_many(np.array([entry], np.int64), device)[0]

    def at_many(self, entries: I64, device: int) -> list[FreeSpace]:
        """Free space on ``device`` just after each of the sorted trace ``entries``.

        A block matters only if some sample falls inside its lifetime, so each block is
        mapped to the range of samples it spans and short-lived blocks drop out at once."""
        q = np.asarray(entries, np.int64)
        sm, bm = self._masks(device)

        def spans(o: I64, c: I64) -> tuple[I64, I64]:
            return np.searchsorted(q, o, side="left"), np.searchsorted(q, c, side="left")

        s_lo, s_hi = spans(self.s_open[sm], self.s_close[sm])
        b_lo, b_hi = spans(self.b_open[bm], self.b_close[bm])
        sk, bk = s_hi > s_lo, b_hi > b_lo
        s_addr, s_size = self.s_addr[sm][sk], self.s_size[sm][sk]
        s_merge = self.s_merge[sm][sk]
        b_addr, b_size = self.b_addr[bm][bk], self.b_size[bm][bk]
        s_lo, s_hi, b_lo, b_hi = s_lo[sk], s_hi[sk], b_lo[bk], b_hi[bk]
        out = []
        for j, e in enumerate(q.tolist()):
            ls = (s_lo <= j) & (s_hi > j)
            lb = (b_lo <= j) & (b_hi > j)
            gaps = free_gaps(s_addr[ls], s_size[ls], b_addr[lb], b_size[lb], s_merge[ls])
            free = int(gaps.sum())
            largest = int(gaps.max()) if gaps.size else 0
            out.append(
                FreeSpace(e, device, int(s_size[ls].sum()), free, largest, _ratio(largest, free))
            )
        return out


def _isin2(
    d1: npt.NDArray[np.integer[Any]], a1: I64, d2: npt.NDArray[np.integer[Any]], a2: I64
) -> npt.NDArray[np.bool_]:
    """``(d1, a1)`` pairs that occur among the ``(d2, a2)`` pairs."""
    k1 = d1.astype(np.int64) * (1 << 56) ^ a1
    k2 = d2.astype(np.int64) * (1 << 56) ^ a2
    return np.isin(k1, k2)


def free_gaps(
    seg_addr: I64,
    seg_size: I64,
    blk_addr: I64,
    blk_size: I64,
    mergeable: npt.NDArray[np.bool_] | None = None,
) -> I64:
    """Sizes of the free gaps between live blocks inside live segments (bytes).

    Touching ranges that are both ``mergeable`` (mapped pieces of one expandable segment)
    count as one range, so a free block may span them; ordinary segments never merge."""
    if seg_addr.size == 0:
        return np.zeros(0, np.int64)
    so = np.argsort(seg_addr)
    s_start, s_end = seg_addr[so], seg_addr[so] + seg_size[so]
    if mergeable is not None and mergeable.any():
        m = mergeable[so]
        first = np.ones(so.size, bool)
        first[1:] = ~(m[1:] & m[:-1] & (s_start[1:] == s_end[:-1]))
        heads = np.flatnonzero(first)
        s_start, s_end = s_start[heads], np.maximum.reduceat(s_end, heads)
    which = np.searchsorted(s_start, blk_addr, side="right") - 1
    inside = (which >= 0) & (blk_addr < s_end[np.clip(which, 0, None)])
    ids = np.arange(s_start.size)
    starts = np.concatenate([blk_addr[inside], s_start, s_end])
    ends = np.concatenate([blk_addr[inside] + blk_size[inside], s_start, s_end])
    seg_id = np.concatenate([which[inside], ids, ids])
    order = np.lexsort((ends, starts, seg_id))
    starts, ends, seg_id = starts[order], ends[order], seg_id[order]
    # Running maximum of ends guards against overlapping blocks; segments do not overlap
    # and are in address order, so it never carries one segment's end into the next.
    reach = np.maximum.accumulate(ends)
    gap = starts[1:] - reach[:-1]
    same = seg_id[1:] == seg_id[:-1]
    g = gap[same]
    return np.asarray(g[g > 0], np.int64)
