"""The interface the scheduler and engine use to place KV: paged pool or contiguous space.

:class:`~kvscope.sim.kv_pool.PagedPool` (vLLM's paged blocks and prefix cache) and
:class:`~kvscope.sim.contiguous.ContiguousPool` (one region per request) both satisfy it.
Sizes are in blocks of ``block_size`` tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from kvscope.sim.kv_pool import Hit, PoolCounters
from kvscope.sim.layout import KVLayout
from kvscope.sim.sequence import Sequence


class BlockAllocator(Protocol):
    """What the scheduler and engine need from a KV allocator (paged or contiguous)."""

    capacity: int
    block_size: int
    layout: KVLayout
    enable_caching: bool
    counters: PoolCounters
    held_total: int
    held_full_total: int
    supports_spans: bool

    @property
    def num_free(self) -> int: ...
    @property
    def used(self) -> int: ...
    @property
    def cached_free(self) -> int: ...
    @property
    def usage(self) -> float: ...
    @property
    def fragmentation(self) -> float: ...
    def lookup(self, seq: Sequence) -> Hit: ...
    def blocks_needed(self, seq: Sequence, slots: int, hit: Hit = ..., cap: bool = ...) -> int: ...
    def allocate(self, seq: Sequence, slots: int, hit: Hit = ...) -> bool: ...
    def grow_private(self, seqs: Iterable[Sequence]) -> None: ...
    def cache(self, seq: Sequence, num_tokens: int) -> None: ...
    def free(self, seq: Sequence, keep_private: bool = ...) -> None: ...
    def take_overhead_s(self, now: float) -> float: ...
    def check(self) -> None: ...
