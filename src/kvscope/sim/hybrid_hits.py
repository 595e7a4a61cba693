"""Prefix-cache hit search over the KV-cache groups of a hybrid pool (vLLM 0.33.0).

The lookup half of :class:`kvscope.sim.hybrid_pool.HybridPool`:
``vllm/v1/core/kv_cache_coordinator.py::HybridKVCacheCoordinator.find_longest_cache_hit``
(a fixed point over the groups, full attention first), the full-attention scan left to right
(``FullAttentionManager.find_longest_cache_hit``) and the window scan right to left for
``cdiv(W - 1, b)`` contiguous cached blocks (``SlidingWindowManager.find_longest_cache_hit``,
no EAGLE). Hits land on the scheduler block (the LCM of the groups' block sizes). Units:
tokens, blocks of each group's own size.
"""

from __future__ import annotations

from kvscope.sim.kv_pool import Block, Hit
from kvscope.sim.sequence import Sequence

Table = list[Block | None]
#: A window-group table entry for a private block without a hash (most of them): blocks only
#: get an identity when they are hashed (they are interchangeable in the free queue otherwise)
ANON = Block(-1, None, 1)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class HybridHitSearch:
    """Hit search of the hybrid pool (mixed into :class:`~kvscope.sim.hybrid_pool.HybridPool`)."""

    _bs: tuple[int, ...]  # block tokens per group (group 0: full history, maybe empty)
    _win: tuple[int, ...]  # window tokens per group (0: full history)
    _need: tuple[int, ...]  # contiguous blocks a window hit needs, cdiv(W - 1, b)
    align: int  # scheduler block size
    _spec_groups: list[list[int]]  # groups looked up together, full attention first
    _cache: dict[tuple[int, object], dict[int, Block]]

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
        simple = len(self._spec_groups) <= 2  # one spec group: vLLM's unitary coordinator
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
                for g, lst in zip(gids, found, strict=True):
                    blocks[g] = lst
                    lengths[g] = curr
                longest = max(longest, curr)
            if curr >= hit_length:
                break
            hit_length = curr
            if simple:
                break
        del blocks[0][cdiv(hit_length, self._bs[0]) :]
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
        del out[cdiv(n, b) :]
        return [out], n

    def _window_hit(
        self, seq: Sequence, gids: list[int], max_length: int
    ) -> tuple[list[Table], int]:
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
            for lst, blk in zip(out, got, strict=True):
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

    def _skipped_blocks(self, g: int, processed: int) -> int:
        w = self._win[g]
        return max(0, processed - w + 1) // self._bs[g] if w else 0
