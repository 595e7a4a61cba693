"""KV offload tiers under the GPU pool: CPU, local disk, remote store; capacity, bandwidth, LRU.

Units: bytes, bytes/s, seconds. One :class:`TierStack` hangs off a :class:`PagedPool`
(``kvscope.sim.kv_pool``); the engine loop does not change: a prefix lookup that runs out of
GPU hits continues block by block through the tiers (each block taken from the first tier,
in stack order, that holds it; the walk stops at the first block no tier holds), a hit block
is copied into a freshly allocated GPU block, and the copy's time is added to the step that
admits the request (``take_pending_s`` through the pool's ``take_overhead_s``).

Semantics chosen, and where they come from:

* **What gets stored.** ``write-through`` (the default): every full block is stored in every
  tier once its tokens are computed, as vLLM's ``OffloadingConnector`` does
  (``vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py``, vLLM >= 0.11:
  blocks are offloaded as they fill, not when evicted), LMCache (``StorageManager.put`` to
  every enabled backend) and SGLang HiCache's ``--hicache-write-policy write_through``.
  ``write-back``: a block is stored only when the GPU prefix cache evicts it, into the first
  tier; a tier's LRU victim moves down to the next tier and the last tier's victim is
  dropped (SGLang's ``write_back``; kvscope's earlier CPU tier).
* **Replacement.** LRU per tier (vLLM's ``LRUOffloadingManager``, LMCache's local backends);
  a load refreshes the block where it was found and leaves it there.
* **Cost.** Stores are asynchronous and never on a step (vLLM and LMCache copy on side
  streams/threads); their bytes and ``bytes / write_bw`` busy seconds are counted per tier so
  a write rate beyond a tier's bandwidth is visible. A load of ``n`` blocks from a tier costs
  ``n x bytes_per_block / read_bw + latency`` (one latency per tier per load), summed over the
  tiers one admission reads. vLLM loads asynchronously (the request waits in
  ``WAITING_FOR_REMOTE_KVS`` while other requests run); kvscope charges the load to the step
  that admits the request, the bound the earlier CPU tier used.
* **Bytes.** ``bytes_per_block`` is one GPU's block from the planner
  (``MemoryPlan.kv_bytes_per_token x block_size``: MLA latent, DeepSeek V4's compressed
  groups, fp8 as planned). A ``per-gpu`` link (the CPU tier: each GPU of an HGX board has
  its own PCIe x16 link) moves each GPU's share in parallel; a ``shared`` link (disk, remote)
  carries all ``kv_ranks`` (TP x PP) shares. Capacity is the engine's total over its ranks, as
  vLLM's ``--kv-offloading-size`` (divided among TP x PP workers), so a tier holds
  ``capacity_bytes // (bytes_per_block x kv_ranks)`` blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

#: Tier kinds, fastest first (the order of a spec is the lookup order).
TIER_KINDS = ("cpu", "disk", "remote")
STORE_POLICIES = ("write-through", "write-back")


@dataclass(frozen=True)
class TierSpec:
    """One offload tier: capacity (bytes, the engine's total), bandwidths (bytes/s), latency.

    ``read_bw``/``write_bw`` of None mean the GPU's host link (the CPU tier's default:
    ``GPUSpec.pcie_bandwidth``, e.g. PCIe Gen5 x16 on H100/H200).
    """

    kind: str
    capacity_bytes: float
    read_bw: float | None = None
    write_bw: float | None = None
    latency_s: float = 0.0
    link: str = "shared"  # per-gpu (one link per GPU, in parallel) or shared (one device)


@dataclass
class TierCounters:
    """Cumulative per-tier counters (blocks, bytes, seconds) for summary.json."""

    capacity_blocks: int = 0
    hit_blocks: int = 0
    loads: int = 0
    load_bytes: float = 0.0
    load_s: float = 0.0
    stored_blocks: int = 0
    written_bytes: float = 0.0
    write_busy_s: float = 0.0
    dropped_blocks: int = 0


@dataclass
class Tier:
    """One tier's LRU of block keys (least recently used first) and its transfer terms."""

    kind: str
    capacity: int  # blocks
    read_bw: float  # bytes/s
    write_bw: float
    latency_s: float
    link_bytes: float  # bytes one block puts on this tier's link
    lru: OrderedDict[Hashable, None] = field(default_factory=OrderedDict)
    counters: TierCounters = field(default_factory=TierCounters)

    def put(self, key: Hashable) -> Hashable | None:
        """Store ``key`` (refresh if present); return the LRU victim it pushed out, if any."""
        lru = self.lru
        if key in lru:
            lru.move_to_end(key)
            return None
        lru[key] = None
        c = self.counters
        c.stored_blocks += 1
        c.written_bytes += self.link_bytes
        c.write_busy_s += self.link_bytes / self.write_bw
        if len(lru) > self.capacity:
            victim, _ = lru.popitem(last=False)
            c.dropped_blocks += 1
            return victim
        return None

    def load_seconds(self, n: int) -> float:
        """Seconds to copy ``n`` blocks from this tier into GPU blocks."""
        return n * self.link_bytes / self.read_bw + self.latency_s if n else 0.0


class TierStack:
    """The offload tiers of one engine, in lookup order, and the store policy."""

    def __init__(self, tiers: Sequence[Tier], policy: str = "write-through") -> None:
        self.tiers = [t for t in tiers if t.capacity > 0]
        self.policy = policy
        self.write_through = policy == "write-through"
        self._pending_s = 0.0

    def __bool__(self) -> bool:
        return bool(self.tiers)

    def find(self, key: Hashable) -> int:
        """Index of the first tier holding ``key``, or -1."""
        for i, tier in enumerate(self.tiers):
            if key in tier.lru:
                return i
        return -1

    def on_computed(self, key: Hashable) -> bool:
        """A block's tokens are computed: write-through stores it in every tier."""
        if not self.write_through:
            return False
        for tier in self.tiers:
            tier.put(key)
        return True

    def on_evicted(self, key: Hashable) -> None:
        """The GPU prefix cache evicted ``key``: write-back stores it, victims cascade down."""
        if self.write_through:
            return
        victim: Hashable | None = key
        for tier in self.tiers:
            if victim is None:
                return
            victim = tier.put(victim)

    def load(self, keys: Sequence[Hashable], where: Sequence[int]) -> float:
        """Copy hit blocks to the GPU (``where[i]``: the tier of ``keys[i]``); the seconds it
        adds to the admitting step (also kept for :meth:`take_pending_s`)."""
        seconds = 0.0
        for i, tier in enumerate(self.tiers):
            mine = [k for k, w in zip(keys, where, strict=True) if w == i]
            if not mine:
                continue
            for key in mine:
                tier.lru.move_to_end(key)
            dt = tier.load_seconds(len(mine))
            c = tier.counters
            c.hit_blocks += len(mine)
            c.loads += 1
            c.load_bytes += len(mine) * tier.link_bytes
            c.load_s += dt
            seconds += dt
        self._pending_s += seconds
        return seconds

    def take_pending_s(self) -> float:
        t, self._pending_s = self._pending_s, 0.0
        return t

    def summary(self, block_size: int) -> dict[str, dict[str, float]]:
        """Per-tier counters (summary.json ``pool.offload``; numbers only, so data-parallel
        replicas' counters add up), hit tokens included."""
        return {
            t.kind: {**vars(t.counters), "hit_tokens": t.counters.hit_blocks * block_size}
            for t in self.tiers
        }

    def terms(self) -> list[dict[str, float | int | str]]:
        """Each tier's resolved terms (blocks, bytes/s, seconds, bytes per block on its link)."""
        return [
            {
                "kind": t.kind,
                "capacity_blocks": t.capacity,
                "read_bw": t.read_bw,
                "write_bw": t.write_bw,
                "latency_s": t.latency_s,
                "link_bytes_per_block": t.link_bytes,
            }
            for t in self.tiers
        ]


def build_stack(
    specs: Sequence[TierSpec],
    policy: str,
    bytes_per_block: float,
    kv_ranks: int,
    host_link_bw: float,
) -> TierStack:
    """The tiers of one engine: ``bytes_per_block`` is one GPU's block (the planner's
    per-token bytes x block size), ``kv_ranks`` the GPUs holding a share of it (TP x PP),
    ``host_link_bw`` the GPU's PCIe bandwidth for tiers whose bandwidth is not given."""
    engine_block = bytes_per_block * kv_ranks
    tiers = []
    for s in specs:
        cap = int(s.capacity_bytes // engine_block) if engine_block > 0 else 0
        link_bytes = bytes_per_block if s.link == "per-gpu" else engine_block
        tier = Tier(
            s.kind,
            cap,
            s.read_bw or host_link_bw,
            s.write_bw or s.read_bw or host_link_bw,
            s.latency_s,
            link_bytes,
        )
        tier.counters.capacity_blocks = cap
        tiers.append(tier)
    return TierStack(tiers, policy)


def tier_figures(
    offload: dict[str, dict[str, float]], lookup_tokens: int, requests: int
) -> dict[str, float]:
    """summary.json figures per tier: the share of prompt lookups it served (hit rate it
    adds), the step seconds its loads added (in total and per request), bytes moved."""
    figs: dict[str, float] = {}
    for key in ("stored_blocks", "hit_blocks", "load_bytes", "load_s"):
        figs[f"offload_{key}"] = sum(c[key] for c in offload.values())
    # earlier name of the CPU tier's figure (one tier then), kept for readers of old runs
    figs["offload_loaded_blocks"] = figs["offload_hit_blocks"]
    for kind, c in offload.items():
        p = f"offload_{kind}_"
        figs[p + "hit_tokens"] = c["hit_tokens"]
        figs[p + "hit_rate"] = c["hit_tokens"] / lookup_tokens if lookup_tokens else 0.0
        figs[p + "load_s"] = c["load_s"]
        figs[p + "load_s_per_request"] = c["load_s"] / requests if requests else 0.0
        figs[p + "load_bytes"] = c["load_bytes"]
        figs[p + "written_bytes"] = c["written_bytes"]
        figs[p + "write_busy_s"] = c["write_busy_s"]
        figs[p + "dropped_blocks"] = c["dropped_blocks"]
    return figs
