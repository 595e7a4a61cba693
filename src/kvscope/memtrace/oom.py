"""OOM events and allocation retries.

An ``oom`` trace entry carries the requested ``size`` and ``device_free`` (the bytes CUDA
still reported free, ``torch/cuda/memory.py`` ``_snapshot`` docstring). At that entry the
replay (:class:`kvscope.memtrace.fragmentation.Replay`) gives the free bytes inside reserved
memory and the largest free block. The verdict:

- ``fragmentation`` when the request would fit in the free bytes inside reserved memory plus
  ``device_free`` but not in the largest free block nor in ``device_free`` alone: the memory
  exists but in pieces (``expandable_segments:True`` or a smaller ``max_split_size_mb`` are
  the usual remedies);
- ``capacity`` otherwise: there is not enough free memory at all.

A *retry* is the caching allocator's answer to a failed ``cudaMalloc``: it frees its cached
segments and tries again (counted as ``num_alloc_retries`` in ``torch.cuda.memory_stats``).
In a trace it shows as a run of ``segment_free`` entries directly followed by a
``segment_alloc`` or ``oom`` entry less than ``RETRY_GAP_US`` later; an ``empty_cache()``
call is not followed by an allocation that quickly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kvscope.memtrace.columns import OOM, SEG_ALLOC, SEG_FREE, SnapshotColumns
from kvscope.memtrace.fragmentation import Replay

#: Longest gap between the cache release and the retried cudaMalloc, µs (an estimate: the
#: two happen inside one ``malloc`` call of the allocator).
RETRY_GAP_US = 1000


@dataclass(frozen=True)
class OomEvent:
    """One OOM with the state of memory at that moment (bytes)."""

    t_s: float
    device: int
    requested_bytes: int
    device_free_bytes: int
    reserved_bytes: int
    allocated_bytes: int
    free_in_reserved_bytes: int
    largest_free_bytes: int
    verdict: str


def oom_events(
    cols: SnapshotColumns,
    replay: Replay,
    entries: npt.NDArray[np.int64],
    t_s: npt.NDArray[np.float64],
    allocated_at: npt.NDArray[np.int64],
) -> list[OomEvent]:
    """One :class:`OomEvent` per ``oom`` entry in ``entries`` (times ``t_s``, allocated
    levels ``allocated_at``)."""
    tr = cols.trace
    out = []
    for k, e in enumerate(entries.tolist()):
        if tr.action[e] != OOM:
            continue
        dev = int(tr.device[e])
        fs = replay.at(e, dev)
        req, dfree = int(tr.size[e]), int(tr.device_free[e])
        fits_pieces = req <= fs.free_bytes + max(dfree, 0)
        frag = fits_pieces and req > fs.largest_free_bytes and req > dfree
        out.append(
            OomEvent(
                t_s=float(t_s[k]),
                device=dev,
                requested_bytes=req,
                device_free_bytes=dfree,
                reserved_bytes=fs.reserved_bytes,
                allocated_bytes=int(allocated_at[k]),
                free_in_reserved_bytes=fs.free_bytes,
                largest_free_bytes=fs.largest_free_bytes,
                verdict="fragmentation" if frag else "capacity",
            )
        )
    return out


def count_retries(cols: SnapshotColumns, start: int, stop: int) -> int:
    """Allocation retries among trace entries ``start .. stop - 1`` (one device's)."""
    tr = cols.trace
    act = tr.action[start:stop]
    if act.size < 2:
        return 0
    free_then_alloc = (act[:-1] == SEG_FREE) & np.isin(act[1:], (SEG_ALLOC, OOM))
    ends = np.flatnonzero(free_then_alloc)
    t = tr.time_us[start:stop]
    gap = t[ends + 1] - t[ends]
    return int((gap <= (RETRY_GAP_US if cols.has_time else 1)).sum())
