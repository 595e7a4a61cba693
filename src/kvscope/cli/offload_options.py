"""The KV offload-tier flags of ``simulate``: ``--kv-offload``, ``--kv-tiers``, store policy.

Parsing and defaults live in :mod:`kvscope.sim.tier_spec`, the tiers in
:mod:`kvscope.sim.kv_tiers`; ``--cpu-offload-gib`` (the CPU tier's size) stays beside them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kvscope.errors import KvscopeError

KvOffloadOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-offload",
        help="KV offload tiers under the GPU, in lookup order: cpu:64GiB[,disk:1TiB]"
        "[,remote:10TiB] (sizes are the engine's total; default bandwidths and latencies in "
        "kvscope.sim.tier_spec) [default: none].",
    ),
]
KvTiersOpt = Annotated[
    Path | None,
    typer.Option(
        "--kv-tiers",
        help="YAML tier spec: tiers: [{kind, capacity_gib, read_gb_per_s, write_gb_per_s, "
        "latency_us, link}], store: write-through|write-back [default: none].",
    ),
]
KvOffloadStoreOpt = Annotated[
    str | None,
    typer.Option(
        "--kv-offload-store",
        help="What the tiers store: write-through (every computed block, as vLLM's "
        "OffloadingConnector and LMCache) or write-back (blocks the GPU evicts) "
        "[default: write-through, or the --kv-tiers file's store].",
    ),
]


def offload_config(
    kv_offload: str | None, kv_tiers: Path | None, store: str | None
) -> dict[str, Any]:
    """``SimConfig`` fields of the three flags (empty when none is given)."""
    from kvscope.sim.tier_spec import load_tiers, parse_offload

    if kv_offload is not None and kv_tiers is not None:
        raise KvscopeError("--kv-offload and --kv-tiers both give the tiers; use one.")
    out: dict[str, Any] = {}
    file_store = None
    if kv_offload is not None:
        out["kv_offload"] = parse_offload(kv_offload)
    elif kv_tiers is not None:
        out["kv_offload"], file_store = load_tiers(kv_tiers)
    if store is not None or file_store is not None:
        out["kv_offload_store"] = store if store is not None else file_store
    return out
