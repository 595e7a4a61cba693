"""``simulate`` for a fleet: pools of replicas built, served by a Cluster, tables and figures.

Each pool's replicas get KV pools of the size ``kvscope plan`` reports for that pool's model,
GPU and flags (:func:`kvscope.sim.run.replica_pools`) and one engine each
(:func:`kvscope.sim.run.engine_for`). ``requests.parquet`` gains ``replica`` (the fleet-wide
index, pools in order), ``steps.parquet`` holds every replica's rows with a ``replica``
column; ``summary.json`` holds fleet-wide figures (latency over all requests, hit rate over
all lookups, KV capacity and peaks summed), a ``replicas`` list (per replica: pool, requests,
hit rate, TTFT, KV peak, busy time) and, with autoscaling, the replica-count timeline and the
replica-seconds provisioned (a drained replica counts until its last request finishes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import numpy as np
import pyarrow as pa

from kvscope.fleet.autoscale import Scaler
from kvscope.fleet.cluster import Cluster
from kvscope.fleet.config import FleetConfig
from kvscope.fleet.routers import make_router
from kvscope.sim.data_parallel import rank_rows
from kvscope.sim.data_parallel_run import rank_figures, serve, sum_counters
from kvscope.sim.engine import sequences_from
from kvscope.sim.outputs import requests_table, steps_table, summary_figures
from kvscope.sim.roofline import cost_summary
from kvscope.sim.run import (
    SimInterrupted,
    SimResult,
    engine_for,
    replica_pools,
    slo_targets,
)
from kvscope.sim.sequence import Sequence
from kvscope.workload import Workload


def simulate_fleet(
    workload: Workload, fleet: FleetConfig, progress: Callable[[int, int], None] | None = None
) -> SimResult:
    """Replay ``workload`` through the fleet; a :class:`SimResult` whose ``config`` is the
    first pool's engine configuration and whose figures are fleet-wide."""
    kv_pools: list[Any] = []
    built: list[Any] = []
    infos: list[dict[str, Any]] = []
    pool_of: list[str] = []
    block_size = 0
    for p in fleet.pools:
        # llama-server is one engine: a pool of them is planned one server at a time
        each = p.sim.engine == "llama.cpp"
        pools, layout, terms, info = replica_pools(p.sim, 1 if each else p.replicas)
        for _ in range(p.replicas - 1 if each else 0):
            pools.append(replica_pools(p.sim, 1)[0][0])
        block_size = block_size or layout.block_size
        for kv in pools:
            built.append(engine_for(workload, p.sim, kv, layout, terms, info, None))
            kv_pools.append(kv)
            infos.append(info)
            pool_of.append(p.name)
    router = make_router(fleet.router, fleet.router_seed, fleet.router_weights)
    scaler = Scaler(fleet.policy(), fleet.replicas)
    cluster = Cluster([e for e, _, _ in built], kv_pools, router, scaler, progress)  # type: ignore[arg-type]
    seqs = sequences_from(workload, block_size)
    sess = workload.session_ids
    keys = [str(s) for s in sess.tolist()] if sess is not None else None
    replicas, stats, counters, interrupted = serve(
        lambda: cluster.run(seqs, keys), cluster, seqs, built, kv_pools
    )
    per = [e.stats for e, _, _ in built]
    caps = [int(i["capacity"]) for i in infos]
    info = dict(infos[0])
    info.update(
        {k: sum_counters(c[k] for c in counters) for k in counters[0]},
        cost=asdict(built[0][2]),
        capacity=sum(caps),
        num_gpu_blocks_total=sum(int(i["num_gpu_blocks"]) for i in infos),
        fleet={
            "router": fleet.router,
            "router_weights": asdict(fleet.router_weights),
            "router_seed": fleet.router_seed,
            "autoscale": fleet.autoscale,
            "pools": [
                {"name": p.name, "replicas": p.replicas, **asdict(p.sim)} for p in fleet.pools
            ],
        },
    )
    tiers = any(kv.tiers is not None for kv in kv_pools)
    req = requests_table(seqs, tiers=tiers).append_column("replica", pa.array(replicas, pa.int64()))
    rows, row_replicas = rank_rows(per)
    steps = steps_table(rows).append_column("replica", pa.array(row_replicas, pa.int64()))
    figs = summary_figures(seqs, req, steps, stats, info, slo_targets(fleet.pools[0].sim))
    figs["cost_model"] = cost_summary(built[0][0].cost, fleet.pools[0].sim)
    figs["router"] = fleet.router
    figs["replicas"] = [
        _replica_figures(r, pool_of[r], seqs, replicas, per[r], caps[r], counters[r])
        for r in range(len(built))
    ]
    figs["running_peak"] = sum(f["running_peak"] for f in figs["replicas"])
    if fleet.autoscale is not None:
        figs["autoscale"] = _autoscale_figures(cluster, seqs, replicas)
    result = SimResult(fleet.pools[0].sim, seqs, stats, info, req, steps, figs, interrupted)
    if interrupted:
        raise SimInterrupted(result)
    return result


def _replica_figures(
    r: int,
    pool: str,
    seqs: list[Sequence],
    replicas: list[int],
    stats: Any,
    capacity: int,
    counters: dict[str, Any],
) -> dict[str, Any]:
    """One replica's headline figures (the summary's ``replicas`` list)."""
    figs = rank_figures(r, seqs, replicas, stats, capacity)
    del figs["dp_rank"]
    ttft = [
        s.first_token_s - s.arrival_s
        for s, k in zip(seqs, replicas, strict=False)
        if k == r and s.first_token_s == s.first_token_s
    ]
    lookups, hits = int(counters["lookup_tokens"]), int(counters["hit_tokens"])
    return {
        "replica": r,
        "pool": pool,
        **figs,
        "prefix_hit_rate": hits / lookups if lookups else 0.0,
        "ttft_p50_s": float(np.percentile(ttft, 50)) if ttft else None,
        "ttft_p99_s": float(np.percentile(ttft, 99)) if ttft else None,
    }


def _autoscale_figures(
    cluster: Cluster, seqs: list[Sequence], replicas: list[int]
) -> dict[str, Any]:
    """Replica-count timeline and replica-seconds (each provisioned interval runs until the
    later of its drain and the last finish of a request routed to it in the interval)."""
    finish_of: list[list[tuple[float, float]]] = [[] for _ in cluster.engines]
    for s, r in zip(seqs, replicas, strict=False):
        if r >= 0 and s.finish_s == s.finish_s:
            finish_of[r].append((s.arrival_s, s.finish_s))
    total = 0.0
    for r, spans in enumerate(cluster.intervals):
        for start, stop in spans:
            last = max((f for a, f in finish_of[r] if start <= a <= stop), default=stop)
            total += max(stop, last) - start
    return {
        "timeline": [{"t_s": t, "replicas": n} for t, n in cluster.timeline],
        "replica_seconds": total,
        "replicas_peak": max(n for _, n in cluster.timeline),
    }
