"""A KV-event capture (rows of the ``kv_events`` table) → per-request block-hash chains.

vLLM stores a request's newly computed full blocks as one ``BlockStored`` whose
``parent_block_hash`` is the last block it found cached (None from the root), per
vllm/v1/core/block_pool.py ``cache_full_blocks`` at v0.33.0. So each stored run, extended
backwards through the parent links seen so far, is the prompt's block chain from the
root; the ancestors are the blocks the engine hit. A run starts where a row's parent is not
the previous row's block, or the publisher's seq or endpoint changes. A request that hit
every block but stored none is not in the stream (vLLM recomputes the last block, which
makes a run unless the prompt ends mid-block).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class RequestChain:
    """One request as the stream shows it: arrival (Unix s), endpoint, blocks root first."""

    t_s: float
    endpoint: str
    blocks: tuple[str, ...]
    #: How many leading blocks the engine found cached (the ancestors of the stored run).
    engine_hits: int
    block_size: int


def chains(rows: Iterable[Sequence[Any]]) -> list[RequestChain]:
    """Rows in the table's column order (t_s, endpoint, seq, kind, block_hash, parent, ...)."""
    parent_of: dict[str, str | None] = {}
    out: list[RequestChain] = []
    run: list[str] = []
    head: tuple[float, str, int, str | None, int] | None = None  # t, ep, seq, parent, bs
    last_key: tuple[str, int] | None = None

    def close() -> None:
        if head is None or not run:
            return
        t, ep, _seq, parent, bs = head
        anc: list[str] = []
        p = parent
        seen: set[str] = set()
        while p is not None and p not in seen:  # a cycle would be a corrupt capture
            seen.add(p)
            anc.append(p)
            p = parent_of.get(p)
        anc.reverse()
        out.append(RequestChain(t, ep, tuple(anc + run), len(anc), bs))

    for r in rows:
        t, ep, seq, kind, h, parent, _tok, bs = r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]
        if kind != "stored":
            continue
        key = (ep, seq)
        if not run or key != last_key or parent != run[-1]:
            close()
            run = []
            head = (t, ep, seq, parent, int(bs or 0))
        run.append(h)
        if h not in parent_of:
            parent_of[h] = parent
        last_key = key
    close()
    return out


def engine_hit_rate(reqs: Sequence[RequestChain]) -> float:
    """Blocks the engine found cached over prompt blocks (NaN for an empty capture)."""
    total = sum(len(r.blocks) for r in reqs)
    return sum(r.engine_hits for r in reqs) / total if total else float("nan")
