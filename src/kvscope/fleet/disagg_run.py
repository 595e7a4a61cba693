"""``simulate --cluster`` for prefill/decode pools: the run directory of a disaggregated run.

Units: seconds, bytes. ``requests.parquet`` holds the shared request columns (arrival at the
prefill pool, first token and finish on the decode pool, status of the side the request
ended on) and then ``prefill_replica`` / ``decode_replica`` (fleet-wide engine indices,
prefill engines first), the TTFT breakdown of :mod:`kvscope.fleet.disagg` (``prefill_s``:
arrival to the prefill's end; ``transfer_wait_s``: waiting for the prefill engine's link;
``transfer_s``: the transfer; ``decode_first_step_s``: the decode engine's first token after
the KV arrived) and the KV moved (``transfer_bytes`` over all decode ranks,
``transfer_bytes_per_rank``). ``steps.parquet`` holds every engine's rows with ``replica``
and ``role``. ``summary.json`` holds fleet-wide figures (latency over all requests, prefix
hits of the prefill pool, KV peaks summed), the disaggregated figures (``ttft_parts_s``,
``transfer_bytes_per_request``, ``transfer_seconds_total``, the link) and a ``replicas``
list (one row per engine, its pool the role's name).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kvscope.fleet.disagg import DisaggConfig, simulate_disagg
from kvscope.results import REQUEST_SCHEMA, latency_summary
from kvscope.sim.data_parallel import merged_stats, rank_rows
from kvscope.sim.data_parallel_run import rank_figures
from kvscope.sim.outputs import kv_figures, steps_table, write_run_dir
from kvscope.sim.run import slo_targets
from kvscope.workload import Workload


@dataclass
class PDResult:
    """A disaggregated run's tables and figures (written like a :class:`SimResult`)."""

    config: DisaggConfig
    requests: pa.Table
    steps: pa.Table
    figures: dict[str, Any]
    #: KV blocks per engine (prefill engines first) and their sum.
    pool_info: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False

    def write(
        self, out: str | Path, workload_spec: dict[str, Any] | None = None, *, force: bool = False
    ) -> Path:
        cfg = {**asdict(self.config), "pool": self.pool_info, "workload": workload_spec or {}}
        return write_run_dir(out, cfg, self.requests, self.steps, self.figures, force=force)


def simulate_pd(workload: Workload, cfg: DisaggConfig) -> PDResult:
    """Serve ``workload`` through the prefill pool, the link and the decode pool."""
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate_disagg(workload, cfg)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    c = res.columns
    pre_engines, pre_seqs, pre_rank, pre_pools = res.sides["prefill"]
    dec_engines, dec_seqs, dec_rank, dec_pools = res.sides["decode"]
    n_pre = len(pre_engines)
    by_id = {s.request_id: s for s in dec_seqs}
    dec = [by_id.get(s.request_id) for s in pre_seqs]
    status = [
        "ok" if d is not None and d.status == "finished" else _status(d or s)
        for s, d in zip(pre_seqs, dec, strict=True)
    ]
    errors = [
        "" if st == "ok" else ((d or s).error or "did not finish")
        for s, d, st in zip(pre_seqs, dec, status, strict=True)
    ]
    preempt = [
        s.preemptions + (d.preemptions if d else 0) for s, d in zip(pre_seqs, dec, strict=True)
    ]
    cols: dict[str, Any] = {
        "request_id": [s.request_id for s in pre_seqs],
        "arrival_s": c["arrival_s"],
        "prompt_tokens": c["prompt_tokens"],
        "output_tokens": c["decoded_tokens"],
        "cached_prompt_tokens": [max(s.cached_prompt_tokens, 0) for s in pre_seqs],
        "first_scheduled_s": [s.first_scheduled_s for s in pre_seqs],
        "first_token_s": c["first_token_s"],
        "finish_s": c["finish_s"],
        "ttft_s": c["ttft_s"],
        "tpot_s": c["tpot_s"],
        "e2e_s": c["e2e_s"],
        "preemptions": preempt,
        "status": status,
        "error": errors,
    }
    req = pa.table({f.name: pa.array(cols[f.name], type=f.type) for f in REQUEST_SCHEMA})
    tp = cfg.decode.tp * cfg.decode.pp
    parts = _breakdown(c)
    extra = {
        "prefill_replica": np.asarray(pre_rank, dtype=np.int64),
        "decode_replica": np.where(c["decode_rank"] >= 0, c["decode_rank"] + n_pre, -1),
        **parts,
        "transfer_bytes": c["transfer_bytes_per_rank"] * tp,
        "transfer_bytes_per_rank": c["transfer_bytes_per_rank"],
    }
    for name, values in extra.items():
        kind = pa.int64() if values.dtype.kind == "i" else pa.float64()
        req = req.append_column(name, pa.array(values, type=kind))
    per = [e.stats for e in pre_engines] + [e.stats for e in dec_engines]
    rows, row_rep = rank_rows(per)
    steps = steps_table(rows).append_column("replica", pa.array(row_rep, pa.int64()))
    roles = ["prefill" if r < n_pre else "decode" for r in row_rep]
    steps = steps.append_column("role", pa.array(roles, pa.string()))
    pools = list(pre_pools) + list(dec_pools)
    caps = [p.num_blocks for p in pools]
    stats = merged_stats(per, wall, cpu)
    figs = latency_summary(req, slo=slo_targets(cfg.decode))
    figs.update(kv_figures(stats, sum(caps), steps))
    lookups = sum(p.counters.lookups_tokens for p in pre_pools)
    hits = sum(p.counters.hit_tokens for p in pre_pools)
    fin = c["finish_s"][np.isfinite(c["finish_s"])]
    figs.update(
        {
            "preemptions": int(sum(preempt)),
            "prefix_hit_tokens": int(hits),
            "prefix_lookup_tokens": int(lookups),
            "prefix_hit_rate": hits / lookups if lookups else 0.0,
            "engine_steps": stats.steps,
            "simulated_s": stats.busy_s,
            "sim_end_s": float(fin.max()) if fin.size else 0.0,
            "wall_s": wall,
            "cpu_s": cpu,
        }
    )
    figs["speedup_vs_real_time"] = figs["sim_end_s"] / wall if wall else None
    figs.update(_pd_figures(res.figures, c, parts, cfg, extra["transfer_bytes"]))
    names = cfg.names
    seqs = list(pre_seqs) + list(dec_seqs)
    ranks = list(pre_rank) + [r + n_pre for r in dec_rank]
    figs["replicas"] = [
        {
            "replica": r,
            "pool": names[0] if r < n_pre else names[1],
            **{
                k: v
                for k, v in rank_figures(r, seqs, ranks, per[r], caps[r]).items()
                if k != "dp_rank"
            },
            "prefix_hit_rate": _hit_rate(pools[r]) if r < n_pre else None,
            **_ttft_of(r, n_pre, c),
        }
        for r in range(len(per))
    ]
    figs["running_peak"] = sum(f["running_peak"] for f in figs["replicas"])
    info = {"capacity": sum(caps), "num_gpu_blocks": caps}
    return PDResult(cfg, req, steps, figs, info)


def _status(seq: Any) -> str:
    return {"rejected": "rejected"}.get(seq.status, "incomplete")


def _breakdown(c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Where each request's time to first token went (seconds; the four add up to TTFT)."""
    return {
        "prefill_s": c["prefill_done_s"] - c["arrival_s"],
        "transfer_wait_s": c["transfer_start_s"] - c["prefill_done_s"],
        "transfer_s": c["transfer_end_s"] - c["transfer_start_s"],
        "decode_first_step_s": c["first_token_s"] - c["transfer_end_s"],
    }


def _hit_rate(pool: Any) -> float:
    look = pool.counters.lookups_tokens
    return pool.counters.hit_tokens / look if look else 0.0


def _ttft_of(r: int, n_pre: int, c: dict[str, np.ndarray]) -> dict[str, float | None]:
    """A decode engine's TTFT percentiles over the requests it served (None for prefill)."""
    if r < n_pre:
        return {"ttft_p50_s": None, "ttft_p99_s": None}
    x = c["ttft_s"][(c["decode_rank"] == r - n_pre) & np.isfinite(c["ttft_s"])]
    if not x.size:
        return {"ttft_p50_s": None, "ttft_p99_s": None}
    p50, p99 = np.percentile(x, [50, 99])
    return {"ttft_p50_s": float(p50), "ttft_p99_s": float(p99)}


def _pd_figures(
    dis: dict[str, Any],
    c: dict[str, np.ndarray],
    parts: dict[str, np.ndarray],
    cfg: DisaggConfig,
    total_bytes: np.ndarray,
) -> dict[str, Any]:
    """The disaggregated figures: pools, link, TTFT breakdown, KV moved."""
    sent = np.isfinite(c["transfer_end_s"])
    secs = parts["transfer_s"][sent]
    return {
        "router": "prefill/decode",
        "disagg": {
            "prefill": {"pool": cfg.names[0], "engines": cfg.prefill.dp, "gpu": cfg.prefill.gpu},
            "decode": {"pool": cfg.names[1], "engines": cfg.decode.dp, "gpu": cfg.decode.gpu},
            "link": dis["link"],
        },
        "ttft_parts_s": dis["ttft_parts_s"],
        "transfer_bytes_per_rank": dis["transfer_bytes_per_rank"],
        "transfer_bytes_per_request_mean": float(total_bytes[sent].mean()) if sent.any() else 0.0,
        "transfer_bytes_total": float(total_bytes[sent].sum()),
        "transfer_s_mean": float(secs.mean()) if secs.size else 0.0,
        "transfer_seconds_total": float(secs.sum()),
        "transfers": int(sent.sum()),
    }
