"""vLLM 0.33.0's hybrid KV manager: one block pool shared by a full group and window groups.

Owns the per-group block tables of layouts with sliding-window groups (gpt-oss, Gemma,
DeepSeek V4's SWA and compressor-state groups), as vLLM 0.33.0 keeps them
(``vllm/v1/core/kv_cache_manager.py::KVCacheManager.allocate_slots``,
``kv_cache_coordinator.py::HybridKVCacheCoordinator``,
``single_type_kv_cache_manager.py::SlidingWindowManager``/``FullAttentionManager``,
``block_pool.py::BlockPool``). Units: blocks of each group's own ``block_tokens``, tokens.

* Every group draws one-block units from one free queue; the null block is never free.
* A layout without full history (every layer slides: Phi-3-mini-4k, Mistral 7B v0.1) keeps
  group 0 empty: vLLM's one ``SlidingWindowSpec`` group under ``UnitaryKVCacheCoordinator``.
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
* Ring groups (DeepSeek V4.1's compressor rings, vLLM 0.31.0 ``CircularBufferManager``): one
  unhashed block per group claimed at the request's first allocation, held to its end.
* Freed blocks without a hash go to the queue's front, hashed ones to its back (LRU), each
  group's blocks in reverse order, group after group.

The simulator uses this pool whenever a layout has window groups
(:class:`kvscope.sim.kv_pool.PagedPool` hands construction over); full-attention layouts
stay on ``PagedPool``'s fast path. Decode-cohort members whose window blocks can no longer
be hashed churn by phase (:mod:`kvscope.sim.window_churn`): the scheduler ticks them once per
step (:meth:`HybridPool.window_step`) when no cached block can be evicted meanwhile.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from math import lcm

from kvscope.errors import KvscopeError
from kvscope.sim.hybrid_hits import ANON, HybridHitSearch, Table
from kvscope.sim.hybrid_hits import cdiv as _cdiv
from kvscope.sim.kv_pool import NO_HIT, Block, Hit, PagedPool, PoolCounters, check_num_blocks
from kvscope.sim.kv_tiers import TierStack
from kvscope.sim.layout import KVLayout
from kvscope.sim.sequence import Sequence
from kvscope.sim.window_churn import SteadyChurn, SteadyWindows


class HybridPool(HybridHitSearch, SteadyChurn, PagedPool):
    """Block tables per group and one shared free queue (see the module docstring)."""

    #: Spans need a block-free interval; window groups change every few tokens.
    supports_spans = True

    def __init__(
        self,
        num_blocks: int,
        layout: KVLayout,
        enable_caching: bool = True,
        tiers: TierStack | None = None,
        window_model: str = "exact",
    ) -> None:
        check_num_blocks(num_blocks)
        if tiers:
            raise KvscopeError(
                "KV offload tiers (--kv-offload, --cpu-offload-gib) are modelled with "
                f"--window-model bound for this model's layout ({layout.name}), not exact."
            )
        self.num_blocks = num_blocks
        self.capacity = num_blocks - 1
        self.layout = layout
        self.block_size = layout.block_size
        self.enable_caching = enable_caching
        self.tiers = None
        self.counters = PoolCounters()
        self._held = 0
        self.held_full_total = 0
        self._version = 0
        # group 0: full history (held empty with no full group, vLLM's single sliding
        # group of a model whose layers all slide); then the window groups, in layout order
        self._g0 = 0 if layout.full_history else 1  # the first group that holds blocks
        self._bs = (layout.block_size, *(w.block_tokens for w in layout.windows))
        self._win = (0, *(w.window_tokens for w in layout.windows))
        self._need = (
            0,
            *(_cdiv(w - 1, b) for b, w in zip(self._bs[1:], self._win[1:], strict=True)),
        )
        #: scheduler block size: the LCM of the groups' block sizes; hits land on it
        self.align = lcm(*self._bs)
        # spec groups for the hit search: equal (block, window) groups are looked up together
        specs: dict[tuple[int, int], list[int]] = {}
        for g in range(1, len(self._bs)):
            specs.setdefault((self._bs[g], self._win[g]), []).append(g)
        self._spec_groups = [[0]][: 1 - self._g0] + list(specs.values())
        self._caps = (0,) * len(self._bs)
        self._ring = layout.ring_groups  # ring blocks of each running request
        self._steady = SteadyWindows(self._bs[1:], self._win[1:])
        self._cohort = None  # the decode cohort whose clock steady members follow
        self.configure(8192, 1 << 62)
        self._anon = self.capacity  # unhashed free blocks: the queue's front
        # hashed free blocks, oldest first (every entry a Block here, never an OwnRun)
        self._lru: OrderedDict[int, Block] = OrderedDict()  # type: ignore[assignment]
        self._free = self.capacity
        self._cache: dict[tuple[int, object], dict[int, Block]] = {}  # type: ignore[assignment]
        self._next_id = 1
        self._tabs: dict[int, list[Table]] = {}  # running request -> one table per group
        self._heads: dict[int, list[int]] = {}  # leading null entries per group
        self._ncached: dict[int, list[int]] = {}  # vLLM num_cached_block per group
        self._junction: dict[int, int] = {}  # shared_prefix_boundary per request
        self._pend_heap = []
        self._pend_of = {}
        self._hashed_live = set()

    def configure(
        self,
        max_num_batched_tokens: int,
        max_model_len: int,
        batches: int = 1,
        cohort: object | None = None,
    ) -> None:
        """Set the admission cap's terms (vLLM ``VllmConfig.max_in_flight_tokens``) and the
        scheduler's decode cohort (its clock drives the steady members' churn)."""
        if cohort is not None:
            self._cohort = cohort
        in_flight = batches * max_num_batched_tokens
        self._caps = (0, *(w.admission_cap(in_flight, max_model_len) for w in self.layout.windows))

    def admission_caps(self) -> tuple[int, ...]:
        """Per window group, the most blocks the full-sequence check reserves for a request."""
        return self._caps[1:]

    def admission_blocks(self, tokens: int, peak: int | None = None) -> int:
        """Blocks the full-sequence admission check asks for a fresh request of ``tokens``;
        with ``peak``, the most the request ever needs: that check at its prompt, or its
        blocks at ``peak`` tokens while decoding (windows at their steady bound)."""
        n = self.layout.full_blocks(tokens) + self._ring
        for g in range(1, len(self._bs)):
            n += min(_cdiv(tokens, self._bs[g]), self._caps[g])
        return n if peak is None else max(n, self.layout.blocks(peak))

    @property
    def cached_free(self) -> int:
        return len(self._lru)

    # ------------------------------------------------------------------ allocation
    def blocks_needed(self, seq: Sequence, slots: int, hit: Hit = NO_HIT, cap: bool = False) -> int:
        """``get_num_blocks_to_allocate`` summed over groups (``cap``: the admission cap)."""
        tabs = self._tabs.get(seq.index)
        bs = self._bs
        if tabs is not None:
            if seq.index in self._steady.members:  # window churn counted in window_step
                return max(self.layout.full_blocks(slots) - len(tabs[0]), 0)
            return sum(max(_cdiv(slots, bs[g]) - len(tabs[g]), 0) for g in range(self._g0, len(bs)))
        n = hit.evictable + self._ring
        groups = hit.groups
        for g in range(self._g0, len(bs)):
            req = _cdiv(slots, bs[g])
            if cap and g:
                req = min(req, self._caps[g])
            have = len(groups[g]) if groups else 0
            n += max(req - max(self._skipped_blocks(g, hit.tokens), have), 0)
        return n

    def allocate(self, seq: Sequence, slots: int, hit: Hit = NO_HIT) -> bool:
        self._sync()
        tabs = self._tabs.get(seq.index)
        if tabs is not None and seq.index in self._steady.members:
            return self._grow_steady(seq, tabs[0], slots)
        if tabs is not None:
            self._cache_upto(seq, min(seq.computed, seq.num_tokens))
            self._remove_skipped(seq, seq.computed)
        if self.blocks_needed(seq, slots, hit) > self._free:
            return False
        if tabs is None:
            tabs = self._adopt(seq, hit)
            if self._ring:  # CircularBufferManager claims the ring's one block
                self._take(self._ring)
                self._held += self._ring
                seq.win += self._ring
        bs = self._bs
        for g in range(self._g0, len(bs)):
            tab = tabs[g]
            new = _cdiv(slots, bs[g]) - len(tab)
            if new > 0:
                self._take(new)
                if g:
                    tab.extend([ANON] * new)
                else:
                    tab.extend(Block(self._next_id + k, None, 1) for k in range(new))
                    self._next_id += new
                self._held += new
                if g == 0:
                    seq.own += new
                    self.held_full_total += new
                else:
                    seq.win += new
        if slots > seq.slots:
            seq.slots = slots
        self._maybe_steady(seq, slots)
        self._note_hashed(seq)
        if seq.index in self._steady.members:
            seq.room = self._steady_room(seq)
        else:
            seq.room = self._next_event(seq) - 1
        return True

    def _grow_steady(self, seq: Sequence, tab: Table, slots: int) -> bool:
        """A steady member's full-history group grows (its windows churn by phase)."""
        self._cache_upto(seq, min(seq.computed, seq.num_tokens))
        new = self.layout.full_blocks(slots) - len(tab)
        if new > self._free:
            return False
        if new > 0:
            self._take(new)
            tab.extend(Block(self._next_id + k, None, 1) for k in range(new))
            self._next_id += new
            self._held += new
            self.held_full_total += new
            seq.own += new
        if slots > seq.slots:
            seq.slots = slots
        seq.room = self._steady_room(seq)
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
                self._held += 1
                if g == 0:
                    seq.own += 1
                    self.held_full_total += 1
                else:
                    seq.win += 1
            row: Table = [None] * skip
            row.extend(got)
            tabs.append(row)
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
            tab[h:k] = [None] * (k - h)
            heads[g] = k
            n = freed.count(ANON)
            seq.win -= k - h - freed.count(None)
            self._anon += n  # private and unhashed: to the queue's front
            self._free += n
            self._held -= n
            if n < k - h:
                real = [b for b in freed if b is not ANON]
                real.reverse()
                self._release(real)

    def _next_event(self, seq: Sequence) -> int:
        """Smallest slot count above ``seq.slots`` at which an allocation changes the pool."""
        s = seq.slots
        heads = self._heads[seq.index]
        nxt = 1 << 62
        for g in range(self._g0, len(self._bs)):
            b = self._bs[g]
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
        group = self._cache.get(key)
        if group is not None:
            group.pop(blk.block_id, None)
            if not group:
                del self._cache[key]
        blk.key = None
        self.counters.evictions += 1

    def _release(self, ordered: Iterable[Block | None]) -> None:
        """``BlockPool.free_blocks``: unhashed to the front, hashed to the back in order."""
        for blk in ordered:
            if blk is None:
                continue
            if blk is ANON:
                self._held -= 1
                self._free += 1
                self._anon += 1
                continue
            blk.ref_cnt -= 1
            self._held -= 1
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
        if seq.index in self._tabs:
            self._note_hashed(seq)

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
        groups = self._bs[:1] if seq.index in self._steady.members else self._bs
        for g in range(self._g0, len(groups)):
            b = groups[g]
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
                if blk is ANON:  # the block gets an identity with its hash
                    blk = tab[j] = Block(self._next_id, None, 1)
                    self._next_id += 1
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
        self.leave_steady(seq)
        self._sync()
        tabs = self._tabs.pop(seq.index, None)
        self._hashed_live.discard(seq.index)
        if tabs is not None:
            if keep_private:
                self._tabs[seq.index] = tabs
                self._cache_upto(seq, min(seq.computed, seq.num_tokens))
                del self._tabs[seq.index]
            self._version += 1
            heads = self._heads[seq.index]
            for g, tab in enumerate(tabs):
                live = tab[heads[g] :] if g else tab  # vLLM trim_null_head
                if not keep_private:
                    for blk in live:
                        if blk is not None and blk.ref_cnt == 1 and blk.key is not None:
                            self._evict(blk)
                n = live.count(ANON)
                self._held -= n
                self._free += n
                self._anon += n
                if n < len(live):
                    real = [b for b in live if b is not ANON]
                    real.reverse()
                    self._release(real)
            self._held -= self._ring
            self._free += self._ring
            self._anon += self._ring
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
        self._sync()
        assert self._anon + len(self._lru) == self._free, (self._anon, len(self._lru), self._free)
        assert 0 <= self._free <= self.capacity
        held: set[int] = set()
        refs: dict[int, int] = {}
        anon = 0
        for tabs in self._tabs.values():
            for tab in tabs:
                anon += tab.count(ANON)
                for blk in tab:
                    if blk is not None and blk is not ANON:
                        held.add(blk.block_id)
                        refs[blk.block_id] = refs.get(blk.block_id, 0) + 1
        own = sum(refs.values())
        pending = [blk for pend in self._pend_of.values() for _due, blk in pend.values()]
        for blk in pending:  # hashed blocks steady members hold (counted by phase)
            held.add(blk.block_id)
            refs[blk.block_id] = refs.get(blk.block_id, 0) + 1
        steady = self._steady.held - len(pending)
        rings = self._ring * len(self._tabs)
        assert len(held) + anon + steady + rings + self._free == self.capacity, (
            len(held),
            self._free,
        )
        for tabs in self._tabs.values():
            for tab in tabs:
                for blk in tab:
                    if blk is not None and blk is not ANON:
                        assert blk.ref_cnt == refs[blk.block_id]
        for blk in pending:
            assert blk.ref_cnt == refs[blk.block_id]
        assert self._held == own + anon + rings
        assert self._steady.held == sum(
            self._steady.held_at(p + self._steady.clock) for p in self._steady.members.values()
        )
