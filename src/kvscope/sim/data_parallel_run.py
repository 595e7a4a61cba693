"""``simulate`` for ``--data-parallel-size`` N > 1: N replicas' pools, engines and outputs.

Builds one pool per DP rank of the size ``kvscope plan`` reports for the layout
(:func:`kvscope.sim.run.replica_pools`), one engine per pool
(:func:`kvscope.sim.run.engine_for`), serves the workload through
:class:`kvscope.sim.data_parallel.DataParallelGroup` and writes the tables with a
``dp_rank`` column; the summary holds whole-deployment figures and a ``dp_ranks`` list.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from kvscope.sim.data_parallel import DataParallelGroup, merged_stats, rank_rows
from kvscope.sim.engine import EngineStats, sequences_from
from kvscope.sim.outputs import requests_table, steps_table, summary_figures, with_dp_rank
from kvscope.sim.roofline import cost_summary
from kvscope.sim.run import (
    SimConfig,
    SimInterrupted,
    SimResult,
    engine_for,
    mark_interrupted,
    pool_counters,
    replica_pools,
    slo_targets,
)
from kvscope.sim.sequence import Sequence
from kvscope.workload import Workload


def simulate_replicas(
    workload: Workload, cfg: SimConfig, progress: Callable[[int, int], None] | None
) -> SimResult:
    """``cfg.dp`` engine replicas on one clock (:mod:`kvscope.sim.data_parallel`)."""
    pools, layout, terms, info = replica_pools(cfg, cfg.dp)
    built = [engine_for(workload, cfg, p, layout, terms, info, None) for p in pools]
    group = DataParallelGroup([e for e, _, _ in built], on_progress=progress)
    seqs = sequences_from(workload, layout.block_size)
    ranks, stats, counters, interrupted = serve(lambda: group.run(seqs), group, seqs, built, pools)
    per_rank = [e.stats for e, _, _ in built]
    info.update(
        {k: sum_counters(c[k] for c in counters) for k in counters[0]},
        cost=asdict(built[0][2]),
        num_gpu_blocks_per_rank=info["num_gpu_blocks"],
        num_gpu_blocks_total=info["num_gpu_blocks"] * cfg.dp,
        capacity_per_rank=info["capacity"],
        capacity=info["capacity"] * cfg.dp,
    )
    req = with_dp_rank(requests_table(seqs, tiers=pools[0].tiers is not None), ranks)
    rows, row_ranks = rank_rows(per_rank)
    steps = with_dp_rank(steps_table(rows), row_ranks)
    figs = summary_figures(seqs, req, steps, stats, info, slo_targets(cfg))
    figs["cost_model"] = cost_summary(built[0][0].cost, cfg)
    figs["dp_ranks"] = [
        rank_figures(r, seqs, ranks, s, int(info["capacity_per_rank"]))
        for r, s in enumerate(per_rank)
    ]
    figs["running_peak"] = sum(f["running_peak"] for f in figs["dp_ranks"])
    result = SimResult(cfg, seqs, stats, info, req, steps, figs, interrupted)
    if interrupted:
        raise SimInterrupted(result)
    return result


def serve(
    run: Callable[[], list[int]],
    group: Any,
    seqs: list[Sequence],
    built: list[tuple[Any, Any, Any]],
    pools: list[Any],
) -> tuple[list[int], EngineStats, list[dict[str, Any]], bool]:
    """Serve ``seqs`` through a multi-engine ``group`` (``run`` returns each request's
    engine): the engines, their merged stats and per-pool counters, and whether Ctrl-C cut
    the run short (then what was dealt so far, the rest marked interrupted)."""
    interrupted = False
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        ranks = run()
    except KeyboardInterrupt:
        interrupted = True
        group.settle()
        mark_interrupted(seqs)
        ranks = ranks_so_far(group, len(seqs))
    per = [e.stats for e, _, _ in built]
    stats = merged_stats(per, time.perf_counter() - t0, time.process_time() - c0)
    counters = [pool_counters(p, a) for p, (_, a, _) in zip(pools, built, strict=True)]
    return ranks, stats, counters, interrupted


def rank_figures(
    rank: int, seqs: list[Sequence], ranks: list[int], stats: EngineStats, capacity: int
) -> dict[str, Any]:
    """One replica's headline figures (the summary's ``dp_ranks`` list)."""
    mine = [s for s, r in zip(seqs, ranks, strict=False) if r == rank]
    return {
        "dp_rank": rank,
        "requests": len(mine),
        "completed": sum(1 for s in mine if s.status == "finished"),
        "output_tokens": sum(s.outputs for s in mine),
        "preemptions": sum(s.preemptions for s in mine),
        "kv_blocks_capacity": capacity,
        "kv_blocks_used_peak": stats.peak_used,
        "kv_usage_peak_frac": stats.peak_used / capacity if capacity else 0.0,
        "running_peak": max((row.running for row in stats.rows), default=0),
        "engine_steps": stats.steps,
        "busy_s": stats.busy_s,
        "sim_end_s": max((s.finish_s for s in mine if s.finish_s == s.finish_s), default=0.0),
    }


def ranks_so_far(group: Any, n: int) -> list[int]:
    """Each request's rank from the group's queues (-1: not dealt before Ctrl-C)."""
    ranks = [-1] * n
    for r, queue in enumerate(group.queues):
        for seq in queue:
            ranks[seq.index] = r
    return ranks


def sum_counters(values: Any) -> Any:
    """Add the replicas' pool counters (numbers, or dicts of numbers such as offload's)."""
    vals = list(values)
    if all(v is None for v in vals):
        return None
    if all(isinstance(v, dict) for v in vals):
        return {k: sum_counters(v[k] for v in vals) for k in vals[0]}
    return sum(vals)
