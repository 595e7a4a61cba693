"""Paged KV pool with vLLM v1 semantics: blocks, free queue, ref counts, prefix cache.

Mirrors ``vllm/v1/core/block_pool.py`` and the full-attention path of
``kv_cache_manager.py``/``single_type_kv_cache_manager.py`` (vLLM 0.33.0):

* ``num_blocks`` blocks, one of them the reserved *null block*, so ``num_blocks - 1`` usable.
* The free queue: freed blocks without a hash are *prepended* (reused first, LIFO), freed
  hashed blocks are *appended* (evicted last, LRU). Allocation pops from the front and evicts
  the popped block's hash from the prefix cache.
* Prefix caching: only full blocks are cached, keyed by a chained hash; a hit *touches* the
  block (ref count + 1, removed from the free queue if it was there). Lookups stop at the
  first miss and never cover the last token (``num_tokens - 1``).
* Requests free their blocks in reverse order so tail blocks are evicted first.

For speed, blocks nobody else can ever hit are not objects: a request's private blocks are a
count, and once freed they sit in the free queue as one :class:`OwnRun` (evicted from the
high index down, exactly the order vLLM's reverse free gives). Unhashed free blocks are a
single counter at the queue's front. Shareable blocks (covered by the workload's prefix
hashes) are individual :class:`Block` objects with ids, ref counts and duplicate-hash order,
as in vLLM. A layout with window groups (sliding window, V4 states) is served by
:class:`kvscope.sim.hybrid_pool.HybridPool` instead: constructing a ``PagedPool`` with such a
layout returns one, so callers keep one constructor.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from kvscope.errors import KvscopeError
from kvscope.sim.kv_tiers import TierStack
from kvscope.sim.layout import KVLayout
from kvscope.sim.sequence import Sequence


@dataclass(eq=False, slots=True)
class Block:
    """A shareable block: identity, prefix-cache key once full, reference count."""

    block_id: int
    key: tuple[Any, ...] | None = None
    ref_cnt: int = 0


@dataclass(eq=False, slots=True)
class OwnRun:
    """Freed private hashed blocks ``lo..hi`` (indices) of one request, in the free queue."""

    owner: int
    lo: int
    hi: int
    qkey: int = 0

    @property
    def size(self) -> int:
        return self.hi - self.lo + 1


@dataclass(frozen=True, slots=True)
class Hit:
    """A prefix-cache lookup result: shareable blocks, then private blocks of a freed run."""

    blocks: tuple[Block, ...]
    own_run: OwnRun | None
    own_count: int
    tokens: int
    evictable: int  # hit blocks now in the free queue (they stop being free when touched)
    tier_keys: tuple[Hashable, ...] = ()  # further blocks found in the offload tiers
    tier_of: tuple[int, ...] = ()  # the tier each of them is in (kvscope.sim.kv_tiers)
    # hybrid layouts (HybridPool): hit blocks per KV-cache group (None = null block) and
    # vLLM's shared_prefix_boundary (the longest single-group hit when it is longer)
    groups: tuple[tuple[Block | None, ...], ...] = ()
    junction: int = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks) + self.own_count


NO_HIT = Hit((), None, 0, 0, 0)


@dataclass
class PoolCounters:
    """Cumulative counters for the run summary."""

    lookups_tokens: int = 0
    hit_tokens: int = 0
    evictions: int = 0
    allocated_blocks: int = 0


def check_num_blocks(num_blocks: int) -> None:
    """Refuse a pool vLLM could not run: one block is its null block, so two at the least."""
    if num_blocks < 2:
        raise KvscopeError(
            f"the KV pool has {num_blocks} blocks; at least 2 are needed "
            "(vLLM reserves one null block).",
            hint="raise --gpu-memory-utilization, use more GPUs or a smaller model, "
            "or give --num-gpu-blocks-override.",
        )


class PagedPool:
    """The GPU KV block pool shared by every request (one per engine replica)."""

    def __new__(cls, num_blocks: int, layout: KVLayout, *args: Any, **kwargs: Any) -> PagedPool:
        # layouts with window groups get vLLM's hybrid manager (kvscope.sim.hybrid_pool) unless
        # window_model="bound" asks for the per-request bound model (fast; not step-exact)
        # (a layout without full history has no bound model of its own: the exact manager,
        # unless offload tiers need the bound pool, which then keeps full history instead)
        exact = kwargs.get("window_model", "exact") == "exact"
        if (
            cls is PagedPool
            and layout.windows
            and (exact or not (layout.full_history or kwargs.get("tiers")))
        ):
            from kvscope.sim.hybrid_pool import HybridPool

            return super().__new__(HybridPool)
        return super().__new__(cls)

    def __init__(
        self,
        num_blocks: int,
        layout: KVLayout,
        enable_caching: bool = True,
        tiers: TierStack | None = None,
        window_model: str = "exact",
    ) -> None:
        check_num_blocks(num_blocks)
        if not layout.full_history:  # bound model with tiers: every block kept (an upper bound)
            layout = KVLayout(layout.block_size, name=layout.name)
        self.num_blocks = num_blocks
        self.capacity = num_blocks - 1  # the null block is never free
        self.layout = layout
        self.block_size = layout.block_size
        self.enable_caching = enable_caching
        self._anon = self.capacity  # unhashed free blocks at the queue's front
        self._lru: OrderedDict[int, Block | OwnRun] = OrderedDict()
        self._free = self.capacity
        self._cache: dict[tuple[int, int], dict[int, Block]] = {}
        self._runs: dict[int, list[OwnRun]] = {}
        self._next_id = 1
        self._next_run = -1
        self.held_total = 0  # sum over requests of blocks held (shared blocks once per holder)
        self.held_full_total = 0  # the same, full-history group only
        self.counters = PoolCounters()
        self.tiers = tiers if tiers else None
        self._version = 0  # bumped whenever a lookup could answer differently

    # ------------------------------------------------------------------ state
    @property
    def num_free(self) -> int:
        return self._free

    @property
    def used(self) -> int:
        """Blocks not in the free queue (in use by some request), null block excluded."""
        return self.capacity - self._free

    @property
    def cached_free(self) -> int:
        """Free blocks that still hold a cached prefix (evictable, reusable on a hit)."""
        return self._free - self._anon

    @property
    def usage(self) -> float:
        """vLLM ``BlockPool.get_usage``: 1 - free / (num_blocks - 1)."""
        return 1.0 - self._free / self.capacity

    #: The engine may advance uniform decode steps in spans over this pool.
    supports_spans = True

    @property
    def fragmentation(self) -> float:
        """External fragmentation: always 0 for a paged pool (any free block is usable)."""
        return 0.0

    def take_overhead_s(self, now: float) -> float:
        """Seconds of pool housekeeping to add to the current step (offload-tier loads)."""
        return self.tiers.take_pending_s() if self.tiers is not None else 0.0

    # ------------------------------------------------------------------ lookup
    def lookup(self, seq: Sequence) -> Hit:
        """Longest cached prefix of ``seq`` (full blocks, at most ``num_tokens - 1`` tokens).

        Memoised per request until the prefix cache changes (a key inserted or evicted, a
        reference count moving): a refused queue head is looked up again every step.
        """
        if not self.enable_caching:
            return NO_HIT
        memo = seq.hit_memo
        if memo is not None and memo[0] == self._version and memo[1] == seq.num_tokens:
            hit: Hit = memo[2]
            return hit
        hit = self._lookup(seq)
        seq.hit_memo = (self._version, seq.num_tokens, hit)
        return hit

    def _lookup(self, seq: Sequence) -> Hit:
        bs = self.block_size
        limit = (seq.num_tokens - 1) // bs
        blocks: list[Block] = []
        evictable = 0
        n_sh = min(seq.n_shareable, limit)
        for j in range(n_sh):
            found = self._cache.get(seq.block_key(j, bs))
            if not found:
                break
            blk = next(iter(found.values()))
            blocks.append(blk)
            evictable += blk.ref_cnt == 0
        own_run: OwnRun | None = None
        own_count = 0
        if len(blocks) == seq.n_shareable and limit > seq.n_shareable:
            for run in self._runs.get(seq.index, ()):
                if run.lo == seq.n_shareable:
                    own_run = run
                    own_count = min(run.size, limit - seq.n_shareable)
                    evictable += own_count
                    break
        gpu = len(blocks) + own_count
        if self.tiers is None or gpu >= limit:
            return Hit(tuple(blocks), own_run, own_count, gpu * bs, evictable)
        keys, where = self._tier_continuation(seq, gpu, limit)
        tokens = (gpu + len(keys)) * bs
        return Hit(tuple(blocks), own_run, own_count, tokens, evictable, keys, where)

    def _tier_continuation(
        self, seq: Sequence, start: int, limit: int
    ) -> tuple[tuple[Hashable, ...], tuple[int, ...]]:
        """Keys of blocks ``start..`` found in the offload tiers (each in the first tier that
        holds it), up to the first block no tier holds."""
        assert self.tiers is not None
        keys: list[Hashable] = []
        where: list[int] = []
        for j in range(start, limit):
            key = self._key(seq, j)
            i = self.tiers.find(key)
            if i < 0:
                break
            keys.append(key)
            where.append(i)
        return tuple(keys), tuple(where)

    def _key(self, seq: Sequence, j: int) -> Hashable:
        """Cache key of block ``j`` of ``seq`` (private blocks: owner and index)."""
        if j < seq.n_shareable:
            return seq.block_key(j, self.block_size)
        return (-1 - seq.index, j)

    def cached_prefix_blocks(self, seq: Sequence) -> int:
        """Leading shareable blocks of ``seq``'s prompt this pool's GPU prefix cache holds now.

        Read-only (no memo, no counters, no LRU touch): what a router learns of a replica from
        its KV events (llm-d's precise prefix-cache scorer). Computed for this pool's block
        size, whatever ``seq.n_shareable`` was set for; 0 without caching or hashes (window
        layouts under vLLM's hybrid manager key their groups apart and also score 0).
        """
        if not self.enable_caching or seq.trace_hashes is None or not seq.hash_block_size:
            return 0
        bs = self.block_size
        n = min(len(seq.trace_hashes) * seq.hash_block_size // bs, (seq.prompt - 1) // bs)
        cache = self._cache
        for j in range(n):
            if not cache.get(seq.block_key(j, bs)):
                return j
        return n

    # ------------------------------------------------------------------ allocation
    def blocks_needed(self, seq: Sequence, slots: int, hit: Hit = NO_HIT, cap: bool = False) -> int:
        """Blocks that allocating ``slots`` token slots would take from the free queue.

        vLLM ``get_num_blocks_to_allocate``: new blocks beyond those held or hit, plus hit
        blocks that are currently free (touching them removes them from the queue).
        ``cap`` (vLLM ``apply_admission_cap``) only matters for window groups.
        """
        layout = self.layout
        full = max(-(-slots // self.block_size) - seq.held_full - hit.num_blocks, 0)
        win = layout.window_blocks(slots) - seq.win if layout.windows else 0
        return full + max(win, 0) + hit.evictable

    def allocate(self, seq: Sequence, slots: int, hit: Hit = NO_HIT) -> bool:
        """Give ``seq`` blocks for ``slots`` token slots (adopting ``hit``); False if short.

        Check before mutate: nothing changes when the pool cannot cover the request.
        """
        if self.blocks_needed(seq, slots, hit) > self._free:
            return False
        if hit.num_blocks:
            self._touch(seq, hit)
        if hit.tier_keys:
            assert self.tiers is not None
            seq.tier_load_s += self.tiers.load(hit.tier_keys, hit.tier_of)
            seq.tier_hit_tokens += len(hit.tier_keys) * self.block_size
        new_full = -(-slots // self.block_size) - seq.held_full
        if new_full > 0:
            self._take(new_full)
            n_sh = seq.n_shareable
            room = n_sh - len(seq.shared)
            if room > 0 and seq.own == 0:
                k = min(room, new_full)
                for _ in range(k):
                    seq.shared.append(Block(self._next_id, None, 1))
                    self._next_id += 1
                seq.own += new_full - k
            else:
                seq.own += new_full
            self.held_total += new_full
            self.held_full_total += new_full
        if self.layout.windows:
            new_win = self.layout.window_blocks(slots) - seq.win
            if new_win > 0:
                self._take(new_win)
                seq.win += new_win
                self.held_total += new_win
        if slots > seq.slots:
            seq.slots = slots
        seq.room = self.layout.next_growth(seq.slots) - 1
        return True

    def grow_private(self, seqs: Iterable[Sequence]) -> None:
        """Give each decoding request one more private full-group block (room checked by the
        caller): the decode cohort's bulk path, equivalent to one :meth:`allocate` each."""
        bs = self.block_size
        n = 0
        for seq in seqs:
            seq.own += 1
            seq.room += bs
            n += 1
        self._take(n)
        self.held_total += n
        self.held_full_total += n

    def _touch(self, seq: Sequence, hit: Hit) -> None:
        self._version += 1
        for blk in hit.blocks:
            if blk.ref_cnt == 0:
                del self._lru[blk.block_id]
                self._free -= 1
            blk.ref_cnt += 1
        seq.shared.extend(hit.blocks)
        run = hit.own_run
        if run is not None and hit.own_count:
            self._free -= hit.own_count
            run.lo += hit.own_count
            if run.lo > run.hi:
                self._drop_run(run)
            seq.own += hit.own_count
        n = hit.num_blocks
        seq.hashed = n
        seq.slots = max(seq.slots, hit.tokens)
        self.held_total += n
        self.held_full_total += n

    def _drop_run(self, run: OwnRun) -> None:
        del self._lru[run.qkey]
        runs = self._runs[run.owner]
        runs.remove(run)
        if not runs:
            del self._runs[run.owner]

    def _take(self, n: int) -> None:
        """Pop ``n`` blocks from the free queue's front, evicting cached ones."""
        self._free -= n
        self.counters.allocated_blocks += n
        if self._anon >= n:
            self._anon -= n
            return
        n -= self._anon
        self._anon = 0
        lru = self._lru
        while n:
            qkey, entry = next(iter(lru.items()))
            if isinstance(entry, Block):
                del lru[qkey]
                self._evict(entry)
                n -= 1
            else:
                k = min(n, entry.size)
                self._version += 1
                if self.tiers is not None:
                    for j in range(entry.hi, entry.hi - k, -1):
                        self.tiers.on_evicted((-1 - entry.owner, j))
                entry.hi -= k
                n -= k
                self.counters.evictions += k
                if entry.hi < entry.lo:
                    self._drop_run(entry)

    def _evict(self, blk: Block) -> None:
        key = blk.key
        if key is None:
            return
        self._version += 1
        if self.tiers is not None:
            self.tiers.on_evicted(key)
        group = self._cache.get(key)
        if group is not None:
            group.pop(blk.block_id, None)
            if not group:
                del self._cache[key]
        blk.key = None
        self.counters.evictions += 1

    # ------------------------------------------------------------------ hashing
    def cache(self, seq: Sequence, num_tokens: int) -> None:
        """Hash ``seq``'s full blocks up to ``num_tokens`` (vLLM ``cache_full_blocks``)."""
        if not self.enable_caching:
            return
        # a block's hash exists once the tokens its key covers do (``hash_shift``: EAGLE/MTP)
        full = min(num_tokens, seq.num_tokens - seq.hash_shift) // self.block_size
        if full <= seq.hashed:
            return
        top = min(full, len(seq.shared))
        if top > seq.hashed:
            self._version += 1
        for j in range(seq.hashed, top):
            blk = seq.shared[j]
            key = seq.block_key(j, self.block_size)
            blk.key = key
            group = self._cache.get(key)
            if group is None:
                self._cache[key] = {blk.block_id: blk}
            else:
                group[blk.block_id] = blk
        if self.tiers is not None and self.tiers.write_through:
            self._version += 1
            for j in range(seq.hashed, full):
                self.tiers.on_computed(self._key(seq, j))
        seq.hashed = full

    # ------------------------------------------------------------------ free
    def free(self, seq: Sequence, keep_private: bool = True) -> None:
        """Release every block of ``seq`` in reverse order (tail blocks evicted first).

        ``keep_private=False`` drops the request's private blocks from the cache instead of
        keeping them reusable (SGLang's retraction releases KV without inserting it).
        """
        self._version += 1
        n_sh = len(seq.shared)
        anon = seq.win
        if seq.own:
            keep = self.enable_caching and keep_private
            hashed_own = max(0, seq.hashed - n_sh) if keep else 0
            anon += seq.own - hashed_own
            if hashed_own:
                run = OwnRun(seq.index, n_sh, n_sh + hashed_own - 1, self._next_run)
                self._next_run -= 1
                self._lru[run.qkey] = run
                self._runs.setdefault(seq.index, []).append(run)
        for blk in reversed(seq.shared):
            blk.ref_cnt -= 1
            if blk.ref_cnt == 0:
                if blk.key is not None and self.enable_caching:
                    self._lru[blk.block_id] = blk
                else:
                    blk.key = None
                    anon += 1
        self._anon += anon
        freed_to_queue = seq.win + seq.own + sum(1 for b in seq.shared if b.ref_cnt == 0)
        self._free += freed_to_queue
        self.held_total -= seq.held
        self.held_full_total -= seq.held_full
        seq.shared = []
        seq.own = 0
        seq.win = 0
        seq.hashed = 0
        seq.slots = 0
        seq.room = 0

    def check(self) -> None:
        """Internal consistency (used by tests): free count equals the queue's content."""
        queued = self._anon + sum(1 if isinstance(e, Block) else e.size for e in self._lru.values())
        assert queued == self._free, (queued, self._free)
        assert 0 <= self._free <= self.capacity
