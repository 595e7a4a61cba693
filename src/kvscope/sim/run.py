"""The public entry point: configure a deployment, replay a workload, get the figures.

``simulate(workload, SimConfig(...))`` builds the KV pool (sized from model, GPU and flags,
or given directly), the scheduler and the cost model, runs the engine and returns a
:class:`SimResult`; :meth:`SimResult.write` writes the run directory.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from kvscope.errors import KvscopeError
from kvscope.sim.cost import CostCoefficients, CostModel, HardwareTerms
from kvscope.sim.engine import Engine, EngineStats, Mode, sequences_from
from kvscope.sim.kv_pool import BlockAllocator, PagedPool
from kvscope.sim.layout import KVLayout, layout_for, pool_blocks
from kvscope.sim.outputs import requests_table, steps_table, summary_figures, write_run_dir
from kvscope.sim.scheduler import Policy, Scheduler, SchedulerConfig
from kvscope.sim.sequence import Sequence
from kvscope.workload import Workload

Allocator = Literal["paged", "contiguous"]


@dataclass(frozen=True)
class SimConfig:
    """A deployment to simulate: model, GPU, parallelism and the engine flags."""

    model: str = "meta-llama/Llama-3.1-8B"
    gpu: str = "H100"
    tp: int = 1
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    gpu_memory_utilization: float = 0.9
    block_size: int | None = None
    num_gpu_blocks_override: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    scheduling_policy: Policy = "fcfs"
    allocator: Allocator = "paged"
    contiguous_growth: Literal["reserve-max", "grow"] = "grow"
    contiguous_fit: Literal["first", "best"] = "first"
    compaction: Literal["immediate", "lazy", "none"] = "immediate"
    compaction_interval_s: float = 1.0
    compaction_batch: int = 16
    mode: Mode = "span"
    sample_interval_s: float = 0.1
    cost_file: str | None = None
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None

    def with_flag(self, flag: str, value: str) -> SimConfig:
        """A copy with one ``--flag`` (as typed on the command line) set; used by sweeps."""
        name = flag.lstrip("-").replace("-", "_")
        if name == "num_gpu_blocks":
            name = "num_gpu_blocks_override"
        if name not in self.__dataclass_fields__:
            raise KvscopeError(f"--sweep: unknown flag '{flag}'.")
        current = getattr(self, name)
        kind = type(current) if current is not None else int
        try:
            if kind is bool:
                v: Any = value.lower() in ("1", "true", "yes", "on")
            elif kind in (int, float, str):
                v = kind(value)
            else:
                v = value
        except ValueError:
            raise KvscopeError(f"--sweep {flag}: '{value}' is not a valid value.") from None
        return replace(self, **{name: v})


@dataclass
class SimResult:
    config: SimConfig
    seqs: list[Sequence]
    stats: EngineStats
    pool_info: dict[str, Any]
    requests: pa.Table
    steps: pa.Table
    figures: dict[str, Any] = field(default_factory=dict)

    def write(self, out: str | Path, workload_spec: dict[str, Any] | None = None) -> Path:
        cfg = {**asdict(self.config), "pool": self.pool_info, "workload": workload_spec or {}}
        return write_run_dir(out, cfg, self.requests, self.steps, self.figures)


def build_pool(cfg: SimConfig) -> tuple[PagedPool, KVLayout, HardwareTerms, dict[str, Any]]:
    """The KV pool a deployment gets, its layout and the cost-model hardware terms."""
    from kvscope.specs.hardware import get_gpu
    from kvscope.specs.registry import load_model

    model = load_model(cfg.model, dtype=cfg.dtype)
    gpu = get_gpu(cfg.gpu)
    layout = layout_for(model, cfg.block_size)
    size = pool_blocks(
        model,
        gpu,
        tp=cfg.tp,
        gpu_memory_utilization=cfg.gpu_memory_utilization,
        kv_cache_dtype=cfg.kv_cache_dtype,
        layout=layout,
    )
    blocks = size.num_blocks if cfg.num_gpu_blocks_override is None else cfg.num_gpu_blocks_override
    if blocks < 2:
        raise KvscopeError(
            f"{model.name} on {cfg.tp}x {gpu.name} leaves {blocks} KV blocks "
            f"({size.kv_bytes_available / (1 << 30):.1f} GiB for KV); nothing can run.",
            hint="use more GPUs (--tp), a higher --gpu-memory-utilization, or "
            "--num-gpu-blocks-override.",
        )
    pool = PagedPool(blocks, layout, enable_caching=cfg.enable_prefix_caching)
    terms = HardwareTerms.from_specs(model, gpu, tp=cfg.tp, kv_cache_dtype=cfg.kv_cache_dtype)
    info = {
        "num_gpu_blocks": blocks,
        "capacity": pool.capacity,
        "block_size": layout.block_size,
        "layout": layout.name,
        "window_blocks_per_request": layout.fixed_blocks_per_request,
        "block_bytes": size.block_bytes,
        "kv_bytes_available": size.kv_bytes_available,
        "sized_by": size.source if cfg.num_gpu_blocks_override is None else "override",
        "max_model_len_default": model.max_position_embeddings,
    }
    return pool, layout, terms, info


def simulate(workload: Workload, cfg: SimConfig) -> SimResult:
    """Replay ``workload`` through the configured engine."""
    pool, layout, terms, info = build_pool(cfg)
    max_len = cfg.max_model_len or int(info["max_model_len_default"])
    sched_cfg = SchedulerConfig(
        max_num_seqs=cfg.max_num_seqs,
        max_num_batched_tokens=cfg.max_num_batched_tokens,
        max_model_len=max_len,
        enable_chunked_prefill=cfg.enable_chunked_prefill,
        policy=cfg.scheduling_policy,
    )
    coef = CostCoefficients.load(cfg.cost_file) if cfg.cost_file else CostCoefficients()
    cost = CostModel(terms, coef)
    alloc: BlockAllocator = pool
    if cfg.allocator == "contiguous":
        from kvscope.sim.contiguous import ContiguousPolicy, ContiguousPool

        if cfg.enable_prefix_caching and workload.hash_values is not None:
            raise KvscopeError(
                "--allocator contiguous has no prefix cache; add --no-enable-prefix-caching."
            )
        policy = ContiguousPolicy(
            growth=cfg.contiguous_growth,
            fit=cfg.contiguous_fit,
            compaction=cfg.compaction,
            interval_s=cfg.compaction_interval_s,
            batch=cfg.compaction_batch,
            block_bytes=float(info["block_bytes"]),
            hbm_bandwidth=terms.hbm_bandwidth,
        )
        contiguous = ContiguousPool(pool.num_blocks, layout, policy)
        contiguous.max_len = max_len
        alloc = contiguous
    sched = Scheduler(sched_cfg, alloc)
    seqs = sequences_from(workload, layout.block_size)
    engine = Engine(sched, cost, mode=cfg.mode, sample_interval_s=cfg.sample_interval_s)
    stats = engine.run(seqs)
    info.update(
        lookup_tokens=pool.counters.lookups_tokens,
        hit_tokens=pool.counters.hit_tokens,
        evicted_blocks=pool.counters.evictions,
        moved_blocks=getattr(alloc, "moved_blocks", 0),
        compactions=getattr(alloc, "compactions", 0),
        max_model_len=max_len,
        cost=asdict(coef),
    )
    req = requests_table(seqs)
    steps = steps_table(stats.rows)
    slo = {
        k: v for k, v in (("ttft_s", cfg.slo_ttft_s), ("tpot_s", cfg.slo_tpot_s)) if v is not None
    }
    figs = summary_figures(seqs, req, steps, stats, info, slo or None)
    return SimResult(cfg, seqs, stats, info, req, steps, figs)
