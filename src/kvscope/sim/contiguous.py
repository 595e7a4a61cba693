"""Contiguous KV allocation, the baseline paging replaced (Kwon et al., SOSP 2023, §3).

Each request gets one contiguous region of a linear KV space measured in blocks of
``block_size`` tokens (so figures compare with the paged pool unit for unit):

* ``reserve-max``: the region covers the request's maximum length at admission (prompt +
  max output tokens), as pre-paging engines (FasterTransformer, Orca) reserved;
* ``grow``: the region covers what is needed now and is reallocated when it must grow:
  extended in place if the space after it is free, else moved to a new hole (doubling its
  size up to the maximum), the move costing a copy.

Holes are found first-fit (lowest address) or best-fit (smallest hole that fits). External
fragmentation = 1 - largest hole / total free (the usual measure). When no hole fits
but enough space is free, *compaction* slides regions down: ``immediate`` compacts on the
spot (the copy time is added to that step), ``lazy`` runs in the background every
``interval_s`` moving at most ``batch`` regions per pass, and allocations wait for it. Copy
time = bytes moved / (2 x HBM bandwidth) since each byte is read and written once.

The class offers the :class:`~kvscope.sim.kv_pool.PagedPool` interface the scheduler uses;
it has no prefix cache (shared prefixes need paging).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from kvscope.errors import KvscopeError
from kvscope.sim.kv_pool import NO_HIT, Hit, PoolCounters
from kvscope.sim.layout import KVLayout
from kvscope.sim.sequence import Sequence

Fit = Literal["first", "best"]
Growth = Literal["reserve-max", "grow"]
Compaction = Literal["immediate", "lazy", "none"]


@dataclass(frozen=True)
class ContiguousPolicy:
    """How regions are sized, placed and compacted."""

    growth: Growth = "grow"
    fit: Fit = "first"
    compaction: Compaction = "immediate"
    interval_s: float = 1.0
    batch: int = 16
    block_bytes: float = 0.0  # bytes per block unit, for copy cost
    hbm_bandwidth: float = 0.0  # bytes/s


class ContiguousPool:
    """A linear KV space of ``num_blocks - 1`` block units carved into per-request regions."""

    supports_spans = False
    enable_caching = False

    def __init__(self, num_blocks: int, layout: KVLayout, policy: ContiguousPolicy) -> None:
        if num_blocks < 2:
            raise KvscopeError(f"the KV space has {num_blocks} blocks; at least 2 are needed.")
        if layout.windows:
            raise KvscopeError("--allocator contiguous supports full-attention models only.")
        self.num_blocks = num_blocks
        self.capacity = num_blocks - 1
        self.layout = layout
        self.block_size = layout.block_size
        self.policy = policy
        self.counters = PoolCounters()
        self.held_total = 0
        self.held_full_total = 0
        self._regions: dict[int, tuple[int, int]] = {}  # seq index -> (start, length)
        self._starts: list[int] = []  # sorted region starts
        self._by_start: dict[int, int] = {}  # start -> seq index
        self._used = 0
        self._pending_s = 0.0
        self._next_compaction = 0.0
        self.moved_blocks = 0
        self.compactions = 0
        self.max_len = 1 << 62

    # ------------------------------------------------------------------ state
    @property
    def num_free(self) -> int:
        return self.capacity - self._used

    @property
    def used(self) -> int:
        return self._used

    @property
    def cached_free(self) -> int:
        return 0

    @property
    def usage(self) -> float:
        return self._used / self.capacity

    def holes(self) -> list[tuple[int, int]]:
        """Free extents ``(start, length)`` in address order."""
        out = []
        pos = 0
        for s in self._starts:
            if s > pos:
                out.append((pos, s - pos))
            pos = s + self._regions[self._by_start[s]][1]
        if pos < self.capacity:
            out.append((pos, self.capacity - pos))
        return out

    @property
    def fragmentation(self) -> float:
        free = self.num_free
        if free == 0:
            return 0.0
        largest = max((h[1] for h in self.holes()), default=0)
        return 1.0 - largest / free

    # ------------------------------------------------------------------ interface
    def lookup(self, seq: Sequence) -> Hit:
        return NO_HIT

    def cache(self, seq: Sequence, num_tokens: int) -> None:
        return None

    def _target(self, seq: Sequence, slots: int) -> int:
        """Region length (blocks) the request should have to hold ``slots`` tokens."""
        need = -(-slots // self.block_size)
        full = -(-min(seq.prompt + seq.max_tokens, self.max_len) // self.block_size)
        if self.policy.growth == "reserve-max":
            return max(need, full)
        cur = self._regions.get(seq.index, (0, 0))[1]
        if need <= cur:
            return cur
        return min(max(need, 2 * cur), max(full, need))

    def blocks_needed(self, seq: Sequence, slots: int, hit: Hit = NO_HIT, cap: bool = False) -> int:
        """Blocks the request must add; ``capacity + 1`` when no placement can exist now."""
        start, cur = self._regions.get(seq.index, (0, 0))
        target = self._target(seq, slots)
        extra = target - cur
        if extra <= 0:
            return 0
        if cur and self._room_after(start, cur) >= extra:
            return extra
        if self._find(target) is not None:
            return extra
        if self.policy.compaction == "immediate" and self.num_free + cur >= target:
            return extra
        return self.capacity + 1

    def allocate(self, seq: Sequence, slots: int, hit: Hit = NO_HIT) -> bool:
        if self.blocks_needed(seq, slots) > self.num_free:
            return False
        start, cur = self._regions.get(seq.index, (0, 0))
        target = self._target(seq, slots)
        if target > cur:
            if cur and self._room_after(start, cur) >= target - cur:
                self._set(seq.index, start, target)
            else:
                pos = self._find(target)
                if pos is None:  # only compaction can make room (checked above)
                    if cur:
                        self._unset(seq.index)
                    self._compact(limit=None)
                    pos = self._find(target)
                assert pos is not None
                if cur and pos != start:
                    self._charge(cur)  # copy the old contents to the new region
                self._set(seq.index, pos, target)
            self.counters.allocated_blocks += target - cur
            self.held_total += target - cur
            self.held_full_total += target - cur
        seq.slots = max(seq.slots, slots)
        seq.room = target * self.block_size
        seq.own = target
        return True

    def grow_private(self, seqs: Iterable[Sequence]) -> None:
        """One more block's worth of room for each request (via :meth:`allocate`)."""
        for seq in seqs:
            self.allocate(seq, seq.room + 1)

    def free(self, seq: Sequence, keep_private: bool = True) -> None:
        length = self._unset(seq.index)
        self.held_total -= length
        self.held_full_total -= length
        seq.own = 0
        seq.slots = 0
        seq.room = 0
        seq.hashed = 0

    def take_overhead_s(self, now: float) -> float:
        """Copy time of moves and compaction since the last step; runs lazy compaction."""
        if self.policy.compaction == "lazy" and now >= self._next_compaction:
            self._compact(limit=self.policy.batch)
            self._next_compaction = now + self.policy.interval_s
        t, self._pending_s = self._pending_s, 0.0
        return t

    def check(self) -> None:
        total = sum(length for _s, length in self._regions.values())
        assert total == self._used <= self.capacity
        ends = [(s, s + self._regions[self._by_start[s]][1]) for s in self._starts]
        for (_a, b), (c, _d) in itertools.pairwise(ends):
            assert b <= c, "regions overlap"

    # ------------------------------------------------------------------ internals
    def _room_after(self, start: int, length: int) -> int:
        end = start + length
        i = bisect.bisect_right(self._starts, start)
        nxt = self._starts[i] if i < len(self._starts) else self.capacity
        return nxt - end

    def _find(self, length: int) -> int | None:
        best: tuple[int, int] | None = None
        for pos, size in self.holes():
            if size >= length:
                if self.policy.fit == "first":
                    return pos
                if best is None or size < best[1]:
                    best = (pos, size)
        return None if best is None else best[0]

    def _unset(self, idx: int) -> int:
        """Remove a region from the address map; returns its length (0 if none)."""
        old = self._regions.pop(idx, None)
        if old is None:
            return 0
        i = bisect.bisect_left(self._starts, old[0])
        del self._starts[i]
        del self._by_start[old[0]]
        self._used -= old[1]
        return old[1]

    def _set(self, idx: int, start: int, length: int) -> None:
        self._unset(idx)
        self._regions[idx] = (start, length)
        bisect.insort(self._starts, start)
        self._by_start[start] = idx
        self._used += length

    def _compact(self, limit: int | None) -> None:
        """Slide regions down to the lowest free address, at most ``limit`` moves."""
        pos = 0
        moves = 0
        for s in list(self._starts):
            idx = self._by_start[s]
            length = self._regions[idx][1]
            if s != pos:
                if limit is not None and moves >= limit:
                    break
                self._set(idx, pos, length)
                self._charge(length)
                moves += 1
            pos += length
        if moves:
            self.compactions += 1

    def _charge(self, blocks: int) -> None:
        self.moved_blocks += blocks
        p = self.policy
        if p.hbm_bandwidth > 0:
            self._pending_s += blocks * p.block_bytes / (p.hbm_bandwidth / 2)
