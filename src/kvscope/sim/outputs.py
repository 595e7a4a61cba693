"""Run-directory outputs of a simulation: requests, steps and the summary figures.

``requests.parquet`` uses the shared :data:`kvscope.results.REQUEST_SCHEMA` (the table
``kvscope bench`` writes), ``steps.parquet`` the :data:`STEP_SCHEMA` below (``t_s`` first,
base units), ``summary.json`` kind ``simulate``. A data-parallel run (several engine
replicas, :mod:`kvscope.sim.data_parallel`) adds a ``dp_rank`` column to both tables: the
replica that served the request, the replica a step sample is of.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from collections.abc import Sequence as Seq
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kvscope.results import REQUEST_SCHEMA, RunDir, Status, latency_summary
from kvscope.sim.engine import EngineStats, StepRow
from kvscope.sim.kv_tiers import tier_figures
from kvscope.sim.sequence import Sequence

STEP_SCHEMA = pa.schema(
    [(f.name, pa.float64() if f.type in (float, "float") else pa.int64()) for f in fields(StepRow)]
)

_STATUS = {
    "finished": Status.OK,
    "rejected": Status.REJECTED,
    "incomplete": Status.INCOMPLETE,
}


def with_dp_rank(table: pa.Table, ranks: Seq[int] | None) -> pa.Table:
    """``table`` with a ``dp_rank`` column appended (unchanged when ``ranks`` is None)."""
    if ranks is None:
        return table
    return table.append_column("dp_rank", pa.array(np.asarray(ranks, dtype=np.int64)))


def requests_table(seqs: Seq[Sequence], spec: bool = False, tiers: bool = False) -> pa.Table:
    """The requests table built column-wise (fast for a million rows); with ``spec`` three
    speculative-decoding columns follow the shared ones (drafts verified, accepted, steps that
    verified drafts, accepted / verified); with ``tiers`` the prompt tokens loaded from KV
    offload tiers and the seconds their loads added to the admitting steps."""
    arrival = np.array([s.arrival_s for s in seqs], dtype=np.float64)
    first_tok = np.array([s.first_token_s for s in seqs], dtype=np.float64)
    finish = np.array([s.finish_s for s in seqs], dtype=np.float64)
    outputs = np.array([s.outputs for s in seqs], dtype=np.int64)
    status = [str(_STATUS.get(s.status, Status.INCOMPLETE)) for s in seqs]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outputs >= 2, (finish - first_tok) / np.maximum(outputs - 1, 1), math.nan)
    cols: dict[str, Any] = {
        "request_id": [s.request_id for s in seqs],
        "arrival_s": arrival,
        "prompt_tokens": np.array([s.prompt for s in seqs], dtype=np.int64),
        "output_tokens": outputs,
        "cached_prompt_tokens": np.array(
            [max(s.cached_prompt_tokens, 0) for s in seqs], dtype=np.int64
        ),
        "first_scheduled_s": np.array([s.first_scheduled_s for s in seqs], dtype=np.float64),
        "first_token_s": first_tok,
        "finish_s": finish,
        "ttft_s": first_tok - arrival,
        "tpot_s": tpot,
        "e2e_s": finish - arrival,
        "preemptions": np.array([s.preemptions for s in seqs], dtype=np.int64),
        "status": status,
        "error": [
            s.error or ("" if st == "ok" else "did not finish")
            for s, st in zip(seqs, status, strict=True)
        ],
    }
    table = pa.table({f.name: pa.array(cols[f.name], type=f.type) for f in REQUEST_SCHEMA})
    if spec:
        for name, attr in SPEC_COLUMNS:
            values = np.array([getattr(s, attr) for s in seqs], dtype=np.int64)
            table = table.append_column(name, pa.array(values, type=pa.int64()))
            cols[attr] = values
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = cols["spec_accepted"] / cols["spec_drafted"]  # NaN: never verified drafts
        table = table.append_column("spec_acceptance", pa.array(rate, type=pa.float64()))
    if tiers:
        hit = np.array([s.tier_hit_tokens for s in seqs], dtype=np.int64)
        load = np.array([s.tier_load_s for s in seqs], dtype=np.float64)
        table = table.append_column("offload_hit_tokens", pa.array(hit, type=pa.int64()))
        table = table.append_column("offload_load_s", pa.array(load, type=pa.float64()))
    return table


#: requests.parquet columns of a speculative-decoding run (after the shared schema's).
SPEC_COLUMNS = (
    ("spec_draft_tokens", "spec_drafted"),
    ("spec_accepted_tokens", "spec_accepted"),
    ("spec_verify_steps", "spec_verifies"),
)


def spec_figures(seqs: Seq[Sequence], spec: Mapping[str, Any]) -> dict[str, Any]:
    """Summary figures of speculative decoding: measured acceptance beside the closed form."""
    drafted = sum(s.spec_drafted for s in seqs)
    accepted = sum(s.spec_accepted for s in seqs)
    verifies = sum(s.spec_verifies for s in seqs)
    return {
        **spec,
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "mean_accepted_length": 1.0 + accepted / verifies if verifies else 1.0,
    }


def steps_table(rows: Seq[StepRow]) -> pa.Table:
    if not rows:
        return STEP_SCHEMA.empty_table()
    data = {f.name: [getattr(r, f.name) for r in rows] for f in fields(StepRow)}
    return pa.table({f.name: pa.array(data[f.name], type=f.type) for f in STEP_SCHEMA})


def kv_figures(stats: EngineStats, capacity: int, steps: pa.Table) -> dict[str, Any]:
    """Peak and mean KV usage, and the 'breathing' of usage over time."""
    out: dict[str, Any] = {
        "kv_blocks_capacity": capacity,
        "kv_blocks_used_peak": stats.peak_used,
        "kv_usage_peak_frac": stats.peak_used / capacity if capacity else 0.0,
        "kv_usage_peak_t_s": stats.peak_t_s,
        "kv_usage_mean_frac": (
            stats.usage_time_integral / stats.busy_s / capacity if stats.busy_s else 0.0
        ),
    }
    if steps.num_rows:
        u = np.asarray(steps.column("kv_usage_frac").to_numpy(), dtype=np.float64)
        t = np.asarray(steps.column("t_s").to_numpy(), dtype=np.float64)
        lo, hi = np.percentile(u, [5, 95])
        out["kv_usage_breathing_p95_p5_frac"] = float(hi - lo)
        waste = np.asarray(steps.column("internal_waste_tokens").to_numpy(), dtype=np.float64)
        out["internal_waste_tokens_mean"] = float(waste.mean())
        top = np.argsort(-u, kind="stable")[:3]
        out["kv_usage_peak_times_s"] = [float(t[i]) for i in sorted(top)]
    return out


def summary_figures(
    seqs: Seq[Sequence],
    requests: pa.Table,
    steps: pa.Table,
    stats: EngineStats,
    pool_info: Mapping[str, Any],
    slo: Mapping[str, float] | None,
) -> dict[str, Any]:
    figs = latency_summary(requests, slo=slo)
    figs.update(kv_figures(stats, int(pool_info["capacity"]), steps))
    lookups = int(pool_info.get("lookup_tokens", 0))
    hits = int(pool_info.get("hit_tokens", 0))
    figs.update(
        {
            "preemptions": int(sum(s.preemptions for s in seqs)),
            "prefix_hit_tokens": hits,
            "prefix_lookup_tokens": lookups,
            "prefix_hit_rate": hits / lookups if lookups else 0.0,
            "engine_steps": stats.steps,
            "engine_spans": stats.spans,
            "simulated_s": stats.busy_s,
            "sim_end_s": max((s.finish_s for s in seqs if s.finish_s == s.finish_s), default=0),
            "wall_s": stats.wall_s,
            "cpu_s": stats.cpu_s,
        }
    )
    figs["speedup_vs_real_time"] = figs["sim_end_s"] / stats.wall_s if stats.wall_s else None
    off = pool_info.get("offload")
    if off:
        figs.update(tier_figures(off, lookups, len(seqs)))
        figs["gpu_hit_rate"] = figs["prefix_hit_rate"] - sum(
            figs[f"offload_{kind}_hit_rate"] for kind in off
        )
    if "speculative" in pool_info:
        figs["speculative"] = spec_figures(seqs, pool_info["speculative"])
    rejected = [s for s in seqs if s.status == "rejected"]
    if rejected:
        figs["rejected_reasons"] = sorted({s.error for s in rejected})[:5]
    return figs


def write_run_dir(
    out: str | Path,
    config: Mapping[str, Any],
    requests: pa.Table,
    steps: pa.Table,
    figures: Mapping[str, Any],
    *,
    force: bool = False,
) -> Path:
    """Write requests.parquet, steps.parquet and summary.json into ``out``."""
    rd = RunDir(out, "simulate", force=force)
    with rd.table("requests", requests.schema) as w:
        for batch in requests.to_batches(max_chunksize=65536):
            w.append_batch(batch)
    with rd.table("steps", steps.schema) as w:
        for batch in steps.to_batches(max_chunksize=65536):
            w.append_batch(batch)
    rd.write_summary(config, figures)
    return rd.path


def write_interrupted(out: str | Path, config: Mapping[str, Any]) -> Path:
    """A run directory holding only ``summary.json`` (status ``interrupted``, the config):
    for a Ctrl-C that came before the engine had anything to report."""
    rd = RunDir(out, "simulate", force=True)
    rd.write_summary(config, {"status": "interrupted"})
    return rd.path
