"""A small model of PyTorch's CUDA caching allocator, used to *write* synthetic snapshots.

It reproduces the behaviour that shapes a snapshot: request rounding, the small/large pools,
segment sizes for each pool, best-fit reuse of cached blocks, block splitting and merging of
neighbouring free blocks, releasing fully free segments when ``cudaMalloc`` fails (the
allocator's retry) and the OOM entry with the bytes CUDA still reports free. Every action is
emitted as a trace entry with the keys the real producer writes. Constants are those of
``c10/cuda/CUDACachingAllocator.cpp``:

- ``kMinBlockSize = 512`` (every request is rounded up to a multiple of 512 B);
- ``kSmallSize = 1 MiB`` (requests up to it use the small pool);
- ``kSmallBuffer = 2 MiB`` (the segment size of the small pool);
- ``kLargeBuffer = 20 MiB`` (the segment size for large requests under ``kMinLargeAlloc``);
- ``kMinLargeAlloc = 10 MiB`` and ``kRoundLarge = 2 MiB`` (larger requests get a segment of
  their size rounded up to 2 MiB);
- a free remainder is split off when it is at least ``kMinBlockSize`` (small pool) or more
  than ``kSmallSize`` (large pool).

It is a model, not a port: one stream, no expandable segments, no graph pools.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KIB = 1024
MIB = 1024 * KIB
K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 * MIB
K_SMALL_BUFFER = 2 * MIB
K_LARGE_BUFFER = 20 * MIB
K_MIN_LARGE_ALLOC = 10 * MIB
K_ROUND_LARGE = 2 * MIB

Frames = list[dict[str, Any]]
Entry = dict[str, Any]


class OutOfMemory(Exception):
    """Raised by :meth:`CachingAllocator.malloc` after it emitted an ``oom`` entry."""


@dataclass
class _Block:
    addr: int
    size: int
    requested: int = 0
    active: bool = False
    frames: Frames = field(default_factory=list)


@dataclass
class _Segment:
    addr: int
    size: int
    small: bool
    frames: Frames
    blocks: list[_Block] = field(default_factory=list)


def round_size(n: int) -> int:
    """Round a request up to the allocator's 512-byte granularity."""
    return max(K_MIN_BLOCK, -(-n // K_MIN_BLOCK) * K_MIN_BLOCK)


def segment_size_for(rounded: int) -> int:
    """Bytes ``cudaMalloc``'d for a new segment holding a block of ``rounded`` bytes."""
    if rounded <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if rounded < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-rounded // K_ROUND_LARGE) * K_ROUND_LARGE


class CachingAllocator:
    """One device's allocator. ``emit`` receives every trace entry (a dict) in order."""

    def __init__(
        self,
        capacity: int,
        base_addr: int,
        emit: Callable[[Entry], None],
        device: int = 0,
        with_time: bool = True,
    ) -> None:
        self.capacity = capacity
        self.device = device
        self._next_addr = base_addr
        self._emit = emit
        self._with_time = with_time
        self.segments: list[_Segment] = []
        self._live: dict[int, tuple[_Segment, _Block]] = {}
        self.reserved = 0

    # -- trace entries with the producer's keys ------------------------------------------
    def _entry(self, action: str, addr: int, size: int, frames: Frames, t_us: int) -> None:
        e: Entry = {"action": action, "addr": addr, "size": size, "stream": 0}
        if self._with_time:
            e["time_us"] = t_us
        e["frames"] = frames
        self._emit(e)

    # -- public operations ---------------------------------------------------------------
    def malloc(self, requested: int, frames: Frames, t_us: int) -> int:
        """Allocate ``requested`` bytes; return the block address or raise OutOfMemory."""
        rounded = round_size(requested)
        small = rounded <= K_SMALL_SIZE
        found = self._best_fit(rounded, small)
        if found is None:
            seg_bytes = segment_size_for(rounded)
            if self.reserved + seg_bytes > self.capacity:
                self.release_cached(t_us)  # the allocator frees cached segments and retries
            if self.reserved + seg_bytes > self.capacity:
                free = self.capacity - self.reserved
                self._emit(self._oom_entry(requested, free, frames, t_us))
                raise OutOfMemory(requested)
            found = self._new_segment(seg_bytes, small, frames, t_us)
        seg, idx = found
        blk = seg.blocks[idx]
        rest = blk.size - rounded
        if (small and rest >= K_MIN_BLOCK) or (not small and rest > K_SMALL_SIZE):
            seg.blocks.insert(idx + 1, _Block(blk.addr + rounded, rest))
            blk.size = rounded
        blk.active, blk.requested, blk.frames = True, requested, frames
        self._live[blk.addr] = (seg, blk)
        self._entry("alloc", blk.addr, requested, frames, t_us)
        return blk.addr

    def free(self, addr: int, frames: Frames, t_us: int) -> None:
        """Free the block at ``addr`` (free_requested then free_completed, same stream)."""
        seg, blk = self._live.pop(addr)
        self._entry("free_requested", addr, blk.requested, frames, t_us)
        self._entry("free_completed", addr, blk.requested, frames, t_us)
        blk.active, blk.requested, blk.frames = False, 0, []
        i = seg.blocks.index(blk)
        if i + 1 < len(seg.blocks) and not seg.blocks[i + 1].active:
            blk.size += seg.blocks.pop(i + 1).size
        if i > 0 and not seg.blocks[i - 1].active:
            seg.blocks[i - 1].size += blk.size
            seg.blocks.pop(i)

    def release_cached(self, t_us: int) -> int:
        """cudaFree every fully free segment (what ``empty_cache`` and the retry do)."""
        freed = 0
        for seg in list(self.segments):
            if len(seg.blocks) == 1 and not seg.blocks[0].active:
                self._entry("segment_free", seg.addr, seg.size, [], t_us)
                self.segments.remove(seg)
                self.reserved -= seg.size
                freed += seg.size
        return freed

    # -- internals -----------------------------------------------------------------------
    def _oom_entry(self, requested: int, free: int, frames: Frames, t_us: int) -> Entry:
        e: Entry = {"action": "oom", "size": requested, "stream": 0, "device_free": free}
        if self._with_time:
            e["time_us"] = t_us
        e["frames"] = frames
        return e

    def _best_fit(self, rounded: int, small: bool) -> tuple[_Segment, int] | None:
        best: tuple[_Segment, int] | None = None
        best_size = 0
        for seg in self.segments:
            if seg.small != small:
                continue
            for i, b in enumerate(seg.blocks):
                if not b.active and b.size >= rounded and (best is None or b.size < best_size):
                    best, best_size = (seg, i), b.size
        return best

    def _new_segment(
        self, seg_bytes: int, small: bool, frames: Frames, t_us: int
    ) -> tuple[_Segment, int]:
        addr = self._next_addr
        self._next_addr += -(-seg_bytes // K_ROUND_LARGE) * K_ROUND_LARGE
        seg = _Segment(addr, seg_bytes, small, frames, [_Block(addr, seg_bytes)])
        self.segments.append(seg)
        self.reserved += seg_bytes
        self._entry("segment_alloc", addr, seg_bytes, frames, t_us)
        return seg, 0

    def segment_dicts(self, legacy: bool = False) -> list[dict[str, Any]]:
        """The end state as the producer writes ``snapshot['segments']``."""
        out = []
        for seg in sorted(self.segments, key=lambda s: s.addr):
            blocks: list[dict[str, Any]] = []
            for b in seg.blocks:
                state = "active_allocated" if b.active else "inactive"
                if legacy:
                    bd: dict[str, Any] = {"size": b.size, "state": state}
                    if b.active:
                        bd["history"] = [
                            {"addr": b.addr, "real_size": b.requested, "frames": b.frames}
                        ]
                else:
                    bd = {
                        "address": b.addr,
                        "size": b.size,
                        "requested_size": b.requested,
                        "state": state,
                        "frames": b.frames,
                    }
                blocks.append(bd)
            alloc = sum(b.size for b in seg.blocks if b.active)
            sd: dict[str, Any] = {
                "device": self.device,
                "address": seg.addr,
                "total_size": seg.size,
                "allocated_size": alloc,
                "active_size": alloc,
                "stream": 0,
                "segment_type": "small" if seg.small else "large",
                "segment_pool_id": (0, 0),
                "blocks": blocks,
            }
            if not legacy:
                sd["requested_size"] = sum(b.requested for b in seg.blocks if b.active)
                sd["is_expandable"] = False
                sd["frames"] = seg.frames
            out.append(sd)
        return out
