"""CPU offload tier for the KV cache: evicted prefix blocks kept in host memory, LRU.

Modelled on the KV-offloading connectors (vLLM's CPU offloading connector, LMCache): a
block evicted from the GPU prefix cache is kept in a host-memory LRU of ``capacity`` blocks;
a prefix lookup that runs out of GPU hits continues in the host tier, and every host hit is
copied back into a freshly allocated GPU block. Stores are asynchronous and free; loads cost
``blocks x block_bytes / pcie_bandwidth`` seconds, added to the step that admits the
request. Host capacity comes from ``--cpu-offload-gib`` (a kvscope option: engines spell it
differently, e.g. vLLM ``--kv-offloading-size``, LMCache ``max_local_cpu_size``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass


@dataclass
class OffloadCounters:
    stored_blocks: int = 0
    loaded_blocks: int = 0
    dropped_blocks: int = 0
    load_s: float = 0.0


class CpuTier:
    """Host-memory LRU of prefix-block keys with PCIe transfer accounting."""

    def __init__(self, capacity_blocks: int, block_bytes: float, pcie_bandwidth: float) -> None:
        self.capacity = max(0, capacity_blocks)
        self.block_bytes = block_bytes
        self.pcie_bandwidth = pcie_bandwidth
        self._lru: OrderedDict[Hashable, None] = OrderedDict()
        self.counters = OffloadCounters()
        self._pending_s = 0.0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._lru

    def store(self, key: Hashable) -> None:
        """Keep an evicted block (most recently used end); drop the LRU one when full."""
        if not self.capacity:
            return
        lru = self._lru
        if key in lru:
            lru.move_to_end(key)
            return
        lru[key] = None
        self.counters.stored_blocks += 1
        if len(lru) > self.capacity:
            lru.popitem(last=False)
            self.counters.dropped_blocks += 1

    def load(self, keys: list[Hashable]) -> None:
        """Copy hit blocks back to the GPU: refresh them and charge the PCIe time."""
        for key in keys:
            self._lru.move_to_end(key)
        n = len(keys)
        seconds = n * self.block_bytes / self.pcie_bandwidth if self.pcie_bandwidth else 0.0
        self.counters.loaded_blocks += n
        self.counters.load_s += seconds
        self._pending_s += seconds

    def take_pending_s(self) -> float:
        t, self._pending_s = self._pending_s, 0.0
        return t
