"""A KV-event capture as a kvscope workload: arrivals, prompt block hashes and lengths.

Each request chain (:mod:`.reconstruct`) becomes one request: arrival = the time of the
batch that stored its blocks, from the capture's first request (seconds); prompt tokens =
its blocks × the block size the engine published (the stream carries full blocks only, so
a prompt that ends mid-block is short by under one block, and a request that stored no
block is not in the stream); output tokens drawn from a length distribution (the stream
says nothing of outputs; 1 by default). Each block's prefix hash is the engine's own block
hash folded to a signed 64-bit integer (BLAKE2b, 8 bytes, of the hash as stored): equal
engine hashes give equal values, so ``kvscope simulate`` hits exactly the prefixes the
engine could have hit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from kvscope.errors import KvscopeError
from kvscope.workload.kv_reuse.reconstruct import RequestChain, engine_hit_rate
from kvscope.workload.lengths import LengthDist
from kvscope.workload.stream import Workload


def block_key(h: str) -> int:
    """The engine's block hash (as stored: hex or decimal text) as a signed int64."""
    return int.from_bytes(hashlib.blake2b(h.encode(), digest_size=8).digest(), "big", signed=True)


def workload_from_chains(
    reqs: Sequence[RequestChain],
    output: LengthDist | None = None,
    seed: int = 0,
    source: dict[str, Any] | None = None,
) -> Workload:
    """One request per chain, in arrival order; output tokens drawn from ``output`` with
    ``seed`` (1 each when None); ``source`` is kept in the workload's spec."""
    if not reqs:
        raise KvscopeError("the capture holds no stored blocks: no request to replay.")
    sizes = {r.block_size for r in reqs}
    if len(sizes) != 1 or min(sizes) < 1:
        shown = ", ".join(str(s) for s in sorted(sizes))
        raise KvscopeError(f"the capture mixes block sizes ({shown}); pick one --endpoint.")
    bs = sizes.pop()
    t0 = min(r.t_s for r in reqs)
    keys: dict[str, int] = {}
    values: list[int] = []
    offsets = [0]
    for r in reqs:
        for h in r.blocks:
            k = keys.get(h)
            if k is None:
                k = keys[h] = block_key(h)
            values.append(k)
        offsets.append(len(values))
    n = len(reqs)
    spec = {
        **(source or {}),
        "format": "kv-events",
        "requests": n,
        "block_size": bs,
        "distinct_blocks": len(keys),
        "engine_hit_rate": engine_hit_rate(reqs),
        "output_len": "1" if output is None else repr(output),
        "seed": seed,
    }
    outs = (
        np.ones(n, dtype=np.int64)
        if output is None
        else output.sample(np.random.default_rng(seed), n)
    )
    return Workload.build(
        [r.t_s - t0 for r in reqs],
        [len(r.blocks) * bs for r in reqs],
        outs,
        id_prefix="ev",
        hash_offsets=np.asarray(offsets, dtype=np.int64),
        hash_values=np.asarray(values, dtype=np.int64),
        hash_block_size=bs,
        spec=spec,
    )
