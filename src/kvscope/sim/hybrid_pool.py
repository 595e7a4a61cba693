"""vLLM 0.33.0's hybrid KV manager: one block pool shared by a full group and window groups.

Owns the per-group block tables of layouts with sliding-window groups (gpt-oss, Gemma,
DeepSeek V4's SWA and compressor-state groups), as vLLM 0.33.0 keeps them
(``vllm/v1/core/kv_cache_manager.py::KVCacheManager.allocate_slots``,
``kv_cache_coordinator.py::HybridKVCacheCoordinator``,
``single_type_kv_cache_manager.py::SlidingWindowManager``/``FullAttentionManager``,
``block_pool.py::BlockPool``). Units: blocks of each group's own ``block_tokens``, tokens.

* Every group draws one-block units from one free queue; the null block is never free.
* Out-of-window blocks are freed only at the request's next allocation, on the
  processed-token basis (``remove_skipped_blocks`` with the computed tokens before the
  step), and become null entries of the table; a window group's table keeps its length.
* The full-sequence admission check caps a window group at
  ``min(cdiv(n, b), cdiv(min(W - 1 + in_flight, max_model_len), b) + 1)`` blocks
  (``SlidingWindowSpec.max_admission_blocks_per_request``, ``apply_admission_cap``), with
  ``in_flight = max_concurrent_batches x max_num_batched_tokens`` (1 batch: no async
  scheduling, no pipeline parallelism).
* Window blocks are cached too, sparsely: with vLLM's default
  ``prefix_cache_retention_interval = 0`` only the ``cdiv(W - 1, b)`` blocks ending at the
  prompt's replay boundary (``num_prompt_tokens - 1``) and at a shared-prefix junction
  (``shared_prefix_boundary``) get a hash (``SlidingWindowManager.reachable_block_mask``).
  Hits are found by the coordinator's fixed-point search over the groups, each window group
  scanning right to left for ``cdiv(W - 1, b)`` contiguous cached blocks.
* Freed blocks without a hash go to the queue's front, hashed ones to its back (LRU), each
  group's blocks in reverse order, group after group.

The simulator uses this pool whenever a layout has window groups
(:class:`kvscope.sim.kv_pool.PagedPool` hands construction over); full-attention layouts
stay on ``PagedPool``'s fast path.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from math import lcm

from kvscope.errors import KvscopeError
from kvscope.sim.kv_pool import NO_HIT, Block, Hit, PagedPool, PoolCounters
from kvscope.sim.layout import KVLayout
from kvscope.sim.offload import CpuTier
from kvscope.sim.sequence import Sequence

Table = list[Block | None]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class HybridPool(PagedPool):
    """Block tables per group and one shared free queue (see the module docstring)."""

    #: Spans need a block-free interval; window groups change every few tokens.
    supports_spans = True

    def __init__(
        self,
        num_blocks: int,
        layout: KVLayout,
        enable_caching: bool = True,
        cpu_tier: CpuTier | None = None,
    ) -> None:
        if num_blocks < 2:
            raise KvscopeError(
                f"the KV pool has {num_blocks} blocks; at least 2 are needed "
                "(vLLM reserves one null block).",
                hint="raise --gpu-memory-utilization, use more GPUs or a smaller model, "
                "or give --num-gpu-blocks-override.",
            )
        if cpu_tier is not None and cpu_tier.capacity:
            raise KvscopeError(
                "--cpu-offload-gib is modelled for full-attention layouts only; "
                f"this model's layout ({layout.name}) has sliding-window groups."
            )
        self.num_blocks = num_blocks
        self.capacity = num_blocks - 1
        self.layout = layout
        self.block_size = layout.block_size
        self.enable_caching = enable_caching
        self.cpu = None
        self.counters = PoolCounters()
        self.held_total = 0
        self.held_full_total = 0
        self._version = 0
        # group 0: full history; then one group per window group, in layout order
        self._bs = (layout.block_size,) + tuple(w.block_tokens for w in layout.windows)
        self._win = (0,) + tuple(w.window_tokens for w in layout.windows)
        self._need = (0,) + tuple(_cdiv(w - 1, b) for b, w in zip(self._bs[1:], self._win[1:]))
        #: scheduler block size: the LCM of the groups' block sizes; hits land on it
        self.align = lcm(*self._bs)
        # spec groups for the hit search: equal (block, window) groups are looked up together
        specs: dict[tuple[int, int], list[int]] = {}
        for g in range(1, len(self._bs)):
            specs.setdefault((self._bs[g], self._win[g]), []).append(g)
        self._spec_groups = [[0], *specs.values()]
        self._caps = (0,) * len(self._bs)
        self.configure(8192, 1 << 62)
        self._anon = self.capacity  # unhashed free blocks: the queue's front
        self._lru: OrderedDict[int, Block] = OrderedDict()  # hashed free blocks, oldest first
        self._free = self.capacity
        self._cache: dict[tuple[int, object], dict[int, Block]] = {}
        self._next_id = 1
        self._tabs: dict[int, list[Table]] = {}  # running request -> one table per group
        self._heads: dict[int, list[int]] = {}  # leading null entries per group
        self._ncached: dict[int, list[int]] = {}  # vLLM num_cached_block per group
        self._junction: dict[int, int] = {}  # shared_prefix_boundary per request

    def configure(self, max_num_batched_tokens: int, max_model_len: int, batches: int = 1) -> None:
        """Set the admission cap's terms (vLLM ``VllmConfig.max_in_flight_tokens``)."""
        in_flight = batches * max_num_batched_tokens
        self._caps = (0,) + tuple(
            w.admission_cap(in_flight, max_model_len) for w in self.layout.windows
        )

    def admission_caps(self) -> tuple[int, ...]:
        """Per window group, the most blocks the full-sequence check reserves for a request."""
        return self._caps[1:]

    def admission_blocks(self, tokens: int) -> int:
        """Blocks the full-sequence admission check asks for a fresh request of ``tokens``."""
        n = _cdiv(tokens, self._bs[0])
        for g in range(1, len(self._bs)):
            n += min(_cdiv(tokens, self._bs[g]), self._caps[g])
        return n

    @property
    def cached_free(self) -> int:
        return len(self._lru)

    # ------------------------------------------------------------------ keys
    def _key(self, seq: Sequence, end: int) -> object:
        """Identity of the tokens ``[0, end)`` of ``seq`` (vLLM's chained block hash)."""
        if seq.trace_hashes is not None and end <= len(seq.trace_hashes) * seq.hash_block_size:
            return seq.trace_hashes[(end - 1) // seq.hash_block_size], end
        return -1 - seq.index, end

    def _cached(self, seq: Sequence, gids: list[int], end: int) -> list[Block] | None:
        out = []
        key = self._key(seq, end)
        for g in gids:
            found = self._cache.get((g, key))
            if not found:
                return None
            out.append(next(iter(found.values())))
        return out

    # ------------------------------------------------------------------ lookup
    def _lookup(self, seq: Sequence) -> Hit:
        """``HybridKVCacheCoordinator.find_longest_cache_hit``: a fixed point over groups."""
        ngroups = len(self._bs)
        hit_length = seq.num_tokens - 1
        longest = 0
        blocks: list[list[Block | None]] = [[] for _ in range(ngroups)]
        lengths = [0] * ngroups
        full_done = False
        simple = len(self._spec_groups) == 2
        while True:
            curr = hit_length
            for gids in self._spec_groups:
                if gids[0] == 0 and full_done:
                    curr = min(curr, lengths[0])
                    continue
                if gids[0] == 0:
                    found, curr = self._full_hit(seq, curr)
                    full_done = True
                else:
                    found, curr = self._window_hit(seq, gids, curr)
                for g, lst in zip(gids, found):
                    blocks[g] = lst
                    lengths[g] = curr
                longest = max(longest, curr)
            if curr >= hit_length:
                break
            hit_length = curr
            if simple:
                break
        del blocks[0][_cdiv(hit_length, self._bs[0]) :]
        evictable = 0
        for g in range(ngroups):
            skip = self._skipped_blocks(g, hit_length)
            evictable += sum(1 for b in blocks[g][skip:] if b is not None and b.ref_cnt == 0)
        junction = longest if longest > hit_length else 0  # vLLM shared_prefix_boundary
        return Hit(
            (),
            None,
            0,
            hit_length,
            evictable,
            groups=tuple(tuple(lst) for lst in blocks),
            junction=junction,
        )

    def _full_hit(self, seq: Sequence, max_length: int) -> tuple[list[Table], int]:
        b = self._bs[0]
        out: Table = []
        for j in range(max_length // b):
            found = self._cached(seq, [0], (j + 1) * b)
            if found is None:
                break
            out.append(found[0])
        n = len(out) * b
        n -= n % self.align
        del out[_cdiv(n, b) :]
        return [out], n

    def _window_hit(self, seq: Sequence, gids: list[int], max_length: int) -> tuple[list[Table], int]:
        """``SlidingWindowManager.find_longest_cache_hit`` (no EAGLE), right to left."""
        g0 = gids[0]
        b, need, align = self._bs[g0], self._need[g0], self.align
        nmax = max_length // b
        out: list[Table] = [[None] * nmax for _ in gids]
        run = 0
        found_run = False
        for i in range(nmax - 1, -1, -1):
            got = self._cached(seq, gids, (i + 1) * b)
            if got is None:
                run = 0
                continue
            if run == 0 and b != align and ((i + 1) * b) % align:
                continue
            for lst, blk in zip(out, got):
                lst[i] = blk
            run += 1
            if run >= need:
                for lst in out:
                    del lst[i + run :]
                found_run = True
                break
        if not found_run:
            for lst in out:
                del lst[run:]
            while b != align and (len(out[0]) * b) % align:
                for lst in out:
                    lst.pop()
        return out, len(out[0]) * b

    # ------------------------------------------------------------------ allocation
    def _skipped_blocks(self, g: int, processed: int) -> int:
        w = self._win[g]
        return max(0, processed - w + 1) // self._bs[g] if w else 0

    def blocks_needed(self, seq: Sequence, slots: int, hit: Hit = NO_HIT, cap: bool = False) -> int:
        """``get_num_blocks_to_allocate`` summed over groups (``cap``: the admission cap)."""
        tabs = self._tabs.get(seq.index)
        bs = self._bs
        if tabs is not None:
            return sum(max(_cdiv(slots, bs[g]) - len(tabs[g]), 0) for g in range(len(bs)))
        n = hit.evictable
        groups = hit.groups
        for g in range(len(bs)):
            req = _cdiv(slots, bs[g])
            if cap and g:
                req = min(req, self._caps[g])
            have = len(groups[g]) if groups else 0
            n += max(req - max(self._skipped_blocks(g, hit.tokens), have), 0)
        return n

    def allocate(self, seq: Sequence, slots: int, hit: Hit = NO_HIT) -> bool:
        tabs = self._tabs.get(seq.index)
        if tabs is not None:
            self._cache_upto(seq, min(seq.computed, seq.num_tokens))
            self._remove_skipped(seq, seq.computed)
        if self.blocks_needed(seq, slots, hit) > self._free:
            return False
        if tabs is None:
            tabs = self._adopt(seq, hit)
        bs = self._bs
        for g in range(len(bs)):
            tab = tabs[g]
            new = _cdiv(slots, bs[g]) - len(tab)
            if new > 0:
                self._take(new)
                tab.extend(Block(self._next_id + k, None, 1) for k in range(new))
                self._next_id += new
                self.held_total += new
                if g == 0:
                    seq.own += new
                    self.held_full_total += new
                else:
                    seq.win += new
        if slots > seq.slots:
            seq.slots = slots
        seq.room = self._next_event(seq) - 1
        return True

    def _adopt(self, seq: Sequence, hit: Hit) -> list[Table]:
        """``add_local_computed_blocks`` for every group: touch the hit, null the skipped."""
        n = len(self._bs)
        tabs: list[Table] = []
        heads = [0] * n
        for g in range(n):
            skip = self._skipped_blocks(g, hit.tokens)
            got = list(hit.groups[g][skip:]) if hit.groups else []
            for blk in got:
                if blk is None:
                    continue
                if blk.ref_cnt == 0:
                    del self._lru[blk.block_id]
                    self._free -= 1
                blk.ref_cnt += 1
                self.held_total += 1
                if g == 0:
                    seq.own += 1
                    self.held_full_total += 1
                else:
                    seq.win += 1
            tabs.append([None] * skip + got)
            heads[g] = skip
        if hit.groups:
            self._version += 1
        self._tabs[seq.index] = tabs
        self._heads[seq.index] = heads
        self._ncached[seq.index] = [len(t) for t in tabs]
        self._junction[seq.index] = hit.junction
        seq.hashed = len(tabs[0])
        seq.slots = max(seq.slots, hit.tokens)
        return tabs

    def _remove_skipped(self, seq: Sequence, processed: int) -> None:
        """``remove_skipped_blocks``: null and free out-of-window blocks, newest first."""
        tabs = self._tabs[seq.index]
        heads = self._heads[seq.index]
        for g in range(1, len(self._bs)):
            tab = tabs[g]
            k = min(self._skipped_blocks(g, processed), len(tab))
            h = heads[g]
            if k <= h:
                continue
            freed = tab[h:k]
            freed.reverse()
            for i in range(h, k):
                tab[i] = None
            heads[g] = k
            seq.win -= sum(1 for b in freed if b is not None)
            self._release(freed)

    def _next_event(self, seq: Sequence) -> int:
        """Smallest slot count above ``seq.slots`` at which an allocation changes the pool."""
        s = seq.slots
        heads = self._heads[seq.index]
        nxt = 1 << 62
        for g, b in enumerate(self._bs):
            grow = _cdiv(s, b) * b + 1
            if grow < nxt:
                nxt = grow
            w = self._win[g]
            if w:
                skip = w + (heads[g] + 1) * b  # slots whose processed tokens free one more
                if skip < nxt:
                    nxt = skip if skip > s else s + 1
        return nxt

    def grow_private(self, seqs: Iterable[Sequence]) -> None:
        for seq in seqs:
            self.allocate(seq, seq.room + 1)

    def _take(self, n: int) -> None:
        """Pop ``n`` blocks from the queue's front, evicting cached ones (oldest first)."""
        self._free -= n
        self.counters.allocated_blocks += n
        if self._anon >= n:
            self._anon -= n
            return
        n -= self._anon
        self._anon = 0
        lru = self._lru
        for _ in range(n):
            _, blk = lru.popitem(last=False)
            self._evict(blk)

    def _evict(self, blk: Block) -> None:
        key = blk.key
        if key is None:
            return
        self._version += 1
        group = self._cache.get(key)  # type: ignore[arg-type]
        if group is not None:
            group.pop(blk.block_id, None)
            if not group:
                del self._cache[key]  # type: ignore[arg-type]
        blk.key = None
        self.counters.evictions += 1

    def _release(self, ordered: Iterable[Block | None]) -> None:
        """``BlockPool.free_blocks``: unhashed to the front, hashed to the back in order."""
        for blk in ordered:
            if blk is None:
                continue
            blk.ref_cnt -= 1
            self.held_total -= 1
            if blk.ref_cnt:
                continue
            self._free += 1
            if blk.key is None or not self.enable_caching:
                blk.key = None
                self._anon += 1
            else:
                self._lru[blk.block_id] = blk
                self._version += 1

    # ------------------------------------------------------------------ hashing
    def cache(self, seq: Sequence, num_tokens: int) -> None:
        self._cache_upto(seq, min(num_tokens, seq.num_tokens))

    def _cache_upto(self, seq: Sequence, num_tokens: int) -> None:
        """``HybridKVCacheCoordinator.cache_blocks``: full blocks up to ``num_tokens``
        rounded down to the scheduler block; window groups only at reachable boundaries."""
        if not self.enable_caching:
            return
        tabs = self._tabs.get(seq.index)
        if tabs is None:
            return
        num_tokens -= num_tokens % self.align
        ncached = self._ncached[seq.index]
        for g, b in enumerate(self._bs):
            full = num_tokens // b
            lo = ncached[g]
            if full <= lo:
                continue
            tab = tabs[g]
            if g == 0:
                todo: Iterable[int] = range(lo, full)
            else:
                todo = sorted(j for j in self._reachable(seq, g) if lo <= j < full)
            for j in todo:
                blk = tab[j]
                if blk is None:
                    continue
                key = (g, self._key(seq, (j + 1) * b))
                blk.key = key
                self._cache.setdefault(key, {})[blk.block_id] = blk
                self._version += 1
            ncached[g] = full

    def _reachable(self, seq: Sequence, g: int) -> set[int]:
        """Window blocks a later hit can use (retention interval 0): the ``cdiv(W-1, b)``
        blocks ending at each reachable boundary, aligned to the scheduler block."""
        b, need = self._bs[g], self._need[g]
        out: set[int] = set()
        for boundary in (seq.prompt - 1, self._junction.get(seq.index, 0)):
            if boundary <= 0:
                continue
            end = boundary // self.align * self.align // b
            out.update(range(max(0, end - need), end))
        return out

    # ------------------------------------------------------------------ free
    def free(self, seq: Sequence, keep_private: bool = True) -> None:
        """Release every block: group after group, each table newest first."""
        tabs = self._tabs.pop(seq.index, None)
        if tabs is not None:
            if keep_private:
                self._tabs[seq.index] = tabs
                self._cache_upto(seq, min(seq.computed, seq.num_tokens))
                del self._tabs[seq.index]
            self._version += 1
            for tab in tabs:
                if not keep_private:
                    for blk in tab:
                        if blk is not None and blk.ref_cnt == 1 and blk.key is not None:
                            self._evict(blk)
                self._release(reversed(tab))
            self.held_full_total -= seq.own
            del self._heads[seq.index]
            del self._ncached[seq.index]
            self._junction.pop(seq.index, None)
        seq.shared = []
        seq.own = 0
        seq.win = 0
        seq.hashed = 0
        seq.slots = 0
        seq.room = 0

    def check(self) -> None:
        """Internal consistency (used by tests): the free count is the queue's content, and
        every block is either free or held by a request's table."""
        assert self._anon + len(self._lru) == self._free, (self._anon, len(self._lru), self._free)
        assert 0 <= self._free <= self.capacity
        held: set[int] = set()
        refs: dict[int, int] = {}
        for tabs in self._tabs.values():
            for tab in tabs:
                for blk in tab:
                    if blk is not None:
                        held.add(blk.block_id)
                        refs[blk.block_id] = refs.get(blk.block_id, 0) + 1
        assert len(held) + self._free == self.capacity, (len(held), self._free)
        for tabs in self._tabs.values():
            for tab in tabs:
                for blk in tab:
                    if blk is not None:
                        assert blk.ref_cnt == refs[blk.block_id]
        assert self.held_total == sum(refs.values())
