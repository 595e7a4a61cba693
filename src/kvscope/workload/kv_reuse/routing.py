"""The same request stream across N replicas: round-robin vs prefix-aware routing.

Prefix-aware routing here sends a request to the replica that served its first block last
(a new first block goes to the least-loaded replica by blocks routed) — the block-hash
affinity KV-aware routers build from these events (llm-d's KV indexer, Dynamo's KV router).
Each replica has its own pool of ``capacity`` blocks; the result is the pooled hit rate.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvscope.workload.kv_reuse.reconstruct import RequestChain
from kvscope.workload.kv_reuse.stack import miss_ratio_curve


def route(reqs: Sequence[RequestChain], replicas: int, policy: str) -> list[list[RequestChain]]:
    if replicas < 1:
        raise ValueError("replicas must be at least 1")
    if policy not in ("round-robin", "prefix"):
        raise ValueError(f"unknown routing policy {policy!r}")
    out: list[list[RequestChain]] = [[] for _ in range(replicas)]
    owner: dict[str, int] = {}
    load = [0] * replicas
    for i, r in enumerate(reqs):
        if policy == "round-robin" or not r.blocks:
            k = i % replicas
        else:
            k = owner.get(r.blocks[0], -1)
            if k < 0:
                k = min(range(replicas), key=load.__getitem__)
                owner[r.blocks[0]] = k
        out[k].append(r)
        load[k] += len(r.blocks)
    return out


def routed_hit_rate(
    reqs: Sequence[RequestChain], replicas: int, policy: str, capacity: int
) -> float:
    """Pooled pool-hit rate over all replicas, each with ``capacity`` blocks."""
    hits = total = 0
    for part in route(reqs, replicas, policy):
        mrc = miss_ratio_curve(part)
        h, _ = mrc.hit_rate(capacity)
        if mrc.total_blocks:
            hits += round(h * mrc.total_blocks)
            total += mrc.total_blocks
    return hits / total if total else float("nan")
