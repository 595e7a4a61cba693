"""Stack-distance miss-ratio curve over block hashes: the hit rate at any pool size at once.

Mattson et al., "Evaluation techniques for storage hierarchies" (IBM Systems Journal, 1970):
an LRU cache of C entries hits exactly the accesses whose stack distance is below C. Two
facts of vLLM's pool (vllm/v1/core/block_pool.py and kv_cache_manager.py at v0.33.0) shape
the access model: a prompt hits only a contiguous prefix of blocks (the lookup stops at the
first miss) and never its last block when the prompt is whole blocks (``max_cache_hit_length
= num_tokens - 1``), so block i hits at C only if every block 0..i has distance < C; and a
request's blocks are freed tail first, so after it the stack holds its block 0 on top. A
tier below the pool (CPU, disk) of T blocks that takes the pool's evictions is an LRU of
C + T: its hits are the accesses with C <= distance < C + T. Capacities are in blocks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kvscope.workload.kv_reuse.reconstruct import RequestChain


class _Fenwick:
    def __init__(self, n: int) -> None:
        self.n = n
        self.t = [0] * (n + 1)

    def add(self, i: int, v: int) -> None:
        i += 1
        while i <= self.n:
            self.t[i] += v
            i += i & -i

    def prefix(self, i: int) -> int:  # sum over [0, i]
        i += 1
        s = 0
        while i > 0:
            s += self.t[i]
            i -= i & -i
        return s


@dataclass(frozen=True, slots=True)
class MissRatioCurve:
    """Per-block prefix distances; ``inf`` for a first touch or a block that can never hit."""

    distances: tuple[float, ...]
    total_blocks: int

    def hit_rate(self, capacity: int, tier: int = 0) -> tuple[float, float]:
        """(pool hit rate, tier hit rate) with ``capacity`` pool blocks and a ``tier``."""
        if self.total_blocks == 0:
            return float("nan"), float("nan")
        gpu = sum(1 for d in self.distances if d < capacity)
        both = sum(1 for d in self.distances if d < capacity + tier)
        return gpu / self.total_blocks, (both - gpu) / self.total_blocks

    def curve(self, capacities: Sequence[int]) -> list[tuple[int, float]]:
        return [(c, self.hit_rate(c)[0]) for c in capacities]


def miss_ratio_curve(
    reqs: Sequence[RequestChain], whole_block_prompts: bool = True
) -> MissRatioCurve:
    """Distances for every prompt block of ``reqs`` in order (see the module docstring)."""
    n_touch = sum(len(r.blocks) for r in reqs)
    fw = _Fenwick(max(1, n_touch))
    last: dict[str, int] = {}
    marks = 0
    clock = 0
    out: list[float] = []
    for r in reqs:
        m = 0.0
        n = len(r.blocks)
        for i, h in enumerate(r.blocks):
            p = last.get(h)
            d = math.inf if p is None else float(marks - fw.prefix(p))
            m = max(m, d)
            out.append(math.inf if (whole_block_prompts and i == n - 1) else m)
        for h in reversed(r.blocks):
            p = last.get(h)
            if p is not None:
                fw.add(p, -1)
                marks -= 1
            fw.add(clock, 1)
            marks += 1
            last[h] = clock
            clock += 1
    return MissRatioCurve(tuple(out), len(out))
