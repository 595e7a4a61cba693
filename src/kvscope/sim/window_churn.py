"""Window-group churn of steadily decoding requests, counted by phase instead of per request.

Once a decoding request is far enough past its prompt that none of its window blocks can
carry a prefix-cache hash (vLLM 0.33.0 caches window blocks only at the replay boundary and at
a shared-prefix junction, both inside the prompt), its window groups only churn: every
``b`` tokens a block leaves the window (``remove_skipped_blocks`` frees it to the free queue's
front, unhashed) and one is allocated for new tokens (from the front). The blocks a request
holds in a group of ``b``-token blocks and window ``W`` depend only on its allocated slots
``c`` modulo ``b``: ``cdiv(c, b) - (c - W) // b = (c mod b > 0) + cdiv(W - c mod b, b)``.

Decode-cohort members advance one token per step on one clock, so members are counted per
phase ``p = c - clock`` modulo each group's block size and the pool's held and free counts are
moved by O(groups) per step (O(sum of block sizes) for a jump of many steps). Units: blocks,
tokens, steps of the cohort clock.
"""

from __future__ import annotations

import heapq
from math import lcm
from typing import Any

from kvscope.sim.hybrid_hits import ANON, Table, cdiv
from kvscope.sim.kv_pool import Block, PoolCounters
from kvscope.sim.sequence import Sequence


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class SteadyWindows:
    """Phase counts of steady members per window group, and the blocks they hold."""

    def __init__(self, blocks: tuple[int, ...], windows: tuple[int, ...]) -> None:
        self.bs = blocks
        self.ws = windows
        self.cnt = [[0] * b for b in blocks]
        # held[g][r]: blocks of group g a steady member holds with c = r (mod b)
        self.f = [
            [(r > 0) + _cdiv(w - r, b) for r in range(b)]
            for b, w in zip(blocks, windows, strict=True)
        ]
        self.period = lcm(*blocks) if blocks else 1
        self.members: dict[int, int] = {}  # request index -> phase p (c = p + clock)
        self.clock = 0
        self.held = 0
        # blocks allocated / freed by all members when the clock reaches e, by e mod period
        self._allocs = [0] * self.period
        self._frees = [0] * self.period

    def held_at(self, c: int) -> int:
        return sum(f[c % b] for f, b in zip(self.f, self.bs, strict=True))

    def add(self, index: int, phase: int) -> int:
        """Count a member whose allocated slots are ``phase + clock``; its blocks held."""
        self.members[index] = phase
        self._count(phase, 1)
        h = self.held_at(phase + self.clock)
        self.held += h
        return h

    def remove(self, index: int) -> int:
        """Stop counting a member; returns its allocated slots now."""
        phase = self.members.pop(index)
        self._count(phase, -1)
        c = phase + self.clock
        self.held -= self.held_at(c)
        return c

    def _count(self, phase: int, d: int) -> None:
        period = self.period
        for cnt, b, w in zip(self.cnt, self.bs, self.ws, strict=True):
            cnt[phase % b] += d
            # a member allocates when its slots reach 1 (mod b), frees one at W (mod b)
            for e in range((1 - phase) % b, period, b):
                self._allocs[e] += d
            for e in range((w - phase) % b, period, b):
                self._frees[e] += d

    def step_counts(self, e: int) -> tuple[int, int]:
        """(blocks allocated, blocks freed) by the members when the clock moves to ``e``."""
        i = e % self.period
        return self._allocs[i], self._frees[i]

    def advance(self, to: int) -> tuple[int, int]:
        """Move the clock to ``to``; returns (change in blocks held, blocks allocated)."""
        e0 = self.clock
        if to <= e0 or not self.members:
            self.clock = max(to, e0)
            return 0, 0
        if to - e0 <= 8:
            delta = allocs = 0
            for e in range(e0 + 1, to + 1):
                a, fr = self.step_counts(e)
                delta += a - fr
                allocs += a
        else:
            new = allocs = 0
            for cnt, b, held in zip(self.cnt, self.bs, self.f, strict=True):
                for r, n in enumerate(cnt):
                    if n:
                        new += n * held[(r + to) % b]
                        allocs += n * (_cdiv(r + to, b) - _cdiv(r + e0, b))
            delta = new - self.held
        self.clock = to
        self.held += delta
        return delta, allocs

    def span_bound(self, anon: int, k: int) -> tuple[int, int]:
        """Steps (at most ``k``) whose churn never pops past ``anon`` unhashed free blocks,
        counting each step's allocations before its frees, and the largest rise of the free
        count over them. The churn repeats every ``period`` steps with no net change."""
        allocs, frees = self._allocs, self._frees
        period = self.period
        rise = level = 0
        e = self.clock + 1
        for j in range(min(k, period)):
            i = (e + j) % period
            a = allocs[i]
            if anon + level < a:
                return j, rise
            level += frees[i] - a
            if level > rise:
                rise = level
        return k, rise


class SteadyChurn:
    """The pool's side of the steady counts (mixed into
    :class:`~kvscope.sim.hybrid_pool.HybridPool`): settle them to the cohort clock, tick
    them once per decode step, bound engine spans, rebuild a member's tables when it leaves."""

    capacity: int
    align: int
    counters: PoolCounters
    _bs: tuple[int, ...]
    _g0: int  # first group holding blocks (1: no full-history group)
    _win: tuple[int, ...]
    _free: int
    _anon: int
    _held: int
    _steady: SteadyWindows
    _cohort: Any  # the scheduler's DecodeCohort (its ``clock``), None before configure
    _tabs: dict[int, list[Table]]
    _heads: dict[int, list[int]]
    _ring: int
    _ncached: dict[int, list[int]]
    _lru: Any
    _version: int
    enable_caching: bool
    # hashed window blocks steady members still hold, released when their window passes:
    # heap of (clock, admission order, group, -index, request, block) = vLLM's free order
    _pend_heap: list[tuple[int, int, int, int, int, Block]]
    # per steady member, (group, table index) -> (due clock, block); a heap entry whose due
    # differs is stale (its request left the steady counts and came back with a new phase)
    _pend_of: dict[int, dict[tuple[int, int], tuple[int, Block]]]
    _hashed_live: set[int]  # other running requests holding hashed window blocks

    @property
    def held_total(self) -> int:
        """Blocks held, summed over requests (the steady members' by their phase)."""
        self._sync()
        return self._held + self._steady.held

    @held_total.setter
    def held_total(self, value: int) -> None:
        raise AttributeError("held_total of a hybrid pool is derived")

    @property
    def num_free(self) -> int:
        self._sync()
        return self._free

    @property
    def used(self) -> int:
        self._sync()
        return self.capacity - self._free

    @property
    def usage(self) -> float:
        self._sync()
        return 1.0 - self._free / self.capacity

    def _sync(self, to: int | None = None) -> None:
        """Bring the steady members' churn up to the cohort clock (after an engine span)."""
        steady = self._steady
        if to is None:
            if not steady.members or self._cohort is None:
                return
            to = self._cohort.clock
        if to > steady.clock:
            delta, allocs = steady.advance(to)
            self._free -= delta
            self._anon -= delta
            self.counters.allocated_blocks += allocs
            heap = self._pend_heap
            while (due := self._live_due()) is not None and due <= to:
                _due, _no, g, negj, index, blk = heapq.heappop(heap)
                del self._pend_of[index][(g, -negj)]
                # the counts freed it to the front; it is hashed: the back, or still shared
                self._anon -= 1
                blk.ref_cnt -= 1
                if blk.ref_cnt:
                    self._free -= 1
                elif blk.key is not None and self.enable_caching:
                    self._lru[blk.block_id] = blk
                    self._version += 1
                else:
                    blk.key = None
                    self._anon += 1
            assert self._anon >= 0

    def _live_due(self) -> int | None:
        """The clock of the next pending release, dropping stale heap entries (their
        request left the steady counts, or left and rejoined with another phase)."""
        heap = self._pend_heap
        while heap:
            due, _no, g, negj, index, _blk = heap[0]
            pend = self._pend_of.get(index)
            if pend is not None and pend.get((g, -negj), (None,))[0] == due:
                return due
            heapq.heappop(heap)
        return None

    def window_step(self, need: int) -> bool:
        """The cohort decodes one step: apply the steady members' churn, unless the step's
        other allocations (``need``) plus theirs could pop a cached block (then False:
        the scheduler goes request by request, in vLLM's order)."""
        self._sync()
        to = self._cohort.clock + 1
        if self._steady.members:
            alloc, _ = self._steady.step_counts(to)
            if self._anon < need + alloc:
                return False
            due = self._live_due()
            if due is not None and due <= to and self._hashed_live:
                return False  # hashed frees of both kinds this step: vLLM's order decides
        self._sync(to)
        return True

    def span_bound(self, k: int) -> tuple[int, int]:
        """Steps of an engine span whose churn evicts nothing; the free count's largest rise."""
        self._sync()
        if not self._steady.members:
            return k, 0
        pending = sum(len(p) for p in self._pend_of.values())
        return self._steady.span_bound(self._anon - pending, k)

    def leave_steady(self, seq: Sequence) -> None:
        """``seq`` leaves the decode cohort: rebuild its window tables at its slots now."""
        if seq.index not in self._steady.members:
            return
        self._sync()
        c = self._steady.remove(seq.index)
        tabs = self._tabs[seq.index]
        heads = self._heads[seq.index]
        ncached = self._ncached[seq.index]
        done = min(c, seq.num_tokens)
        done -= done % self.align
        win = 0
        for g in range(1, len(self._bs)):
            b = self._bs[g]
            length, head = cdiv(c, b), (c - self._win[g]) // b
            tabs[g] = [None] * head + [ANON] * (length - head)
            heads[g] = head
            ncached[g] = max(ncached[g], done // b)
            win += length - head
        for (g, j), (_due, blk) in self._pend_of.pop(seq.index, {}).items():
            tabs[g][j] = blk
        self._held += win
        seq.win = win + self._ring  # ring blocks stay held through the churn
        self._note_hashed(seq)

    def _steady_room(self, seq: Sequence) -> int:
        """A steady member's next full-group growth; without that group, none before its end
        (bounded, so the cohort's event for it comes due and leaves its heap)."""
        b = self._bs[0]
        return (
            _cdiv(seq.slots, b) * b
            if self._g0 == 0
            else max(seq.slots, seq.prompt + seq.max_tokens)
        )

    def _note_hashed(self, seq: Sequence) -> None:
        """Track whether ``seq``'s live window entries include hashed blocks."""
        tabs = self._tabs.get(seq.index)
        if tabs is not None and seq.index not in self._steady.members:
            heads = self._heads[seq.index]
            for g in range(1, len(tabs)):
                live = tabs[g][heads[g] :]
                if len(live) != live.count(ANON) + live.count(None):
                    self._hashed_live.add(seq.index)
                    return
        self._hashed_live.discard(seq.index)

    def _maybe_steady(self, seq: Sequence, slots: int) -> None:
        """Count a decode-cohort member by phase once no window block of it can get a hash;
        the hashed ones it still holds are released by clock (``_pend_heap``)."""
        if (
            not seq.in_cohort
            or self._cohort is None
            or slots != seq.computed + 1
            or seq.computed < seq.prompt
            or self._steady.clock != self._cohort.clock + 1
        ):
            return
        tabs = self._tabs[seq.index]
        heads = self._heads[seq.index]
        ncached = self._ncached[seq.index]
        # no window block may get a hash later: every reachable one (they all end at or
        # before the prompt's end) is behind the window or already past the hashing point
        last = seq.prompt // self.align * self.align
        win = 0
        pend: list[tuple[int, int, Block]] = []
        for g in range(1, len(self._bs)):
            b = self._bs[g]
            if slots < self._win[g] + b or last // b > max(heads[g], ncached[g]):
                return
            tab = tabs[g]
            for j in range(heads[g], len(tab)):
                blk = tab[j]
                if blk is None:
                    return
                if blk is not ANON:
                    pend.append((g, j, blk))
                win += 1
        if win != self._steady.held_at(slots):
            return
        for g in range(1, len(tabs)):
            tabs[g] = []
        self._held -= win
        phase = slots - self._steady.clock
        self._steady.add(seq.index, phase)
        self._hashed_live.discard(seq.index)
        if pend:
            mine = self._pend_of[seq.index] = {}
            for g, j, blk in pend:
                due = self._win[g] + (j + 1) * self._bs[g] - phase  # window passes block j
                mine[(g, j)] = (due, blk)
                heapq.heappush(self._pend_heap, (due, seq.admit_no, g, -j, seq.index, blk))
