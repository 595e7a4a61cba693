"""The public entry point: configure a deployment, replay a workload, get the figures.

``simulate(workload, SimConfig(...))`` builds the KV pool (sized from model, GPU and flags,
or given directly), the scheduler and the cost model, runs the engine and returns a
:class:`SimResult`; :meth:`SimResult.write` writes the run directory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from kvscope.errors import KvscopeError
from kvscope.sim.allocator import BlockAllocator
from kvscope.sim.cost import CostCoefficients, CostModel, DrafterCost, HardwareTerms
from kvscope.sim.deployment import build_pool, replica_pools
from kvscope.sim.engine import Engine, EngineStats, Mode, sequences_from
from kvscope.sim.kv_pool import PagedPool
from kvscope.sim.kv_tiers import TierSpec
from kvscope.sim.layout import KVLayout
from kvscope.sim.outputs import requests_table, steps_table, summary_figures, write_run_dir
from kvscope.sim.roofline import cost_model_for, cost_summary
from kvscope.sim.scheduler import Policy, Scheduler, SchedulerConfig
from kvscope.sim.sequence import Sequence
from kvscope.sim.spec_config import parse_spec_config
from kvscope.sim.spec_decode import SpecDecodeConfig, apply_hash_lookahead
from kvscope.validate import count, finite
from kvscope.workload import Workload
from kvscope.workload.lengths import MAX_TOKENS

Allocator = Literal["paged", "contiguous"]
__all__ = ["SimConfig", "SimInterrupted", "SimResult", "build_pool", "replica_pools", "simulate"]


@dataclass(frozen=True)
class SimConfig:
    """A deployment to simulate: model, GPU, parallelism and the engine flags."""

    engine: Literal["vllm", "sglang", "llama.cpp"] = "vllm"
    model: str = "meta-llama/Llama-3.1-8B"
    revision: str | None = None  # Hugging Face revision of a Hub id (branch, tag or commit)
    gpu: str = "H100"
    tp: int = 1
    # Parallel layout, as `kvscope plan` takes it (kvscope.plan.config.Parallelism): pp
    # stages per engine, dp engine replicas, experts spread over tp x dp ranks, SGLang's DP
    # attention inside the TP group; num_gpus, when given, must equal the layout's GPUs.
    pp: int = 1
    dp: int = 1
    enable_expert_parallel: bool = False
    enable_dp_attention: bool = False
    num_gpus: int | None = None
    engine_version: str | None = None  # None: the release kvscope models (plan's default)
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    gpu_memory_utilization: float | None = None  # vLLM's default 0.9 via the planner
    mem_fraction_static: float | None = None  # SGLang's, default by GPU and TP
    block_size: int | None = None
    num_gpu_blocks_override: int | None = None
    max_num_seqs: int | None = None  # None: the engine's default, as the planner resolves it
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    ctx_size: int | None = None  # llama.cpp's -c (KV tokens over all slots); llama.cpp only
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    # KV offload tiers (kvscope.sim.kv_tiers): --kv-offload / --kv-tiers, in lookup order;
    # --cpu-offload-gib sets the CPU tier's size over them (None: as given; 0: no CPU tier)
    kv_offload: tuple[TierSpec, ...] = ()
    kv_offload_store: Literal["write-through", "write-back"] = "write-through"
    cpu_offload_gib: float | None = None
    #: window groups: "bound" (each request at its per-request bound; fast, the default) or
    #: "exact" (vLLM 0.33.0's hybrid manager, sim/hybrid_pool.py: step for step vLLM's, but
    #: some 40x slower on DeepSeek V4 for now)
    window_model: Literal["bound", "exact"] = "bound"
    scheduling_policy: Policy = "fcfs"
    preemption_mode: Literal["recompute", "swap"] = "recompute"
    allocator: Allocator = "paged"
    contiguous_growth: Literal["reserve-max", "grow"] = "grow"
    contiguous_fit: Literal["first", "best"] = "first"
    compaction: Literal["immediate", "lazy", "none"] = "immediate"
    compaction_interval_s: float = 1.0
    compaction_batch: int = 16
    mode: Mode = "span"
    sample_interval_s: float = 0.1
    cost_file: str | None = None
    cost_model: str = "roofline"  # roofline, fitted or aic (kvscope.sim.roofline.cost_model_for)
    async_scheduling: bool | None = None  # vLLM --[no-]async-scheduling; None: its default
    # vLLM --decode-context-parallel-size: a block holds block_size x DCP tokens of a request
    decode_context_parallel_size: int = 1
    mm_encoder_tp_mode: str = "weights"  # vLLM: where a VLM's encoder lives (plan's weights)
    disable_custom_all_reduce: bool = False  # --disable-custom-all-reduce (plan's non-torch)
    cold_compile: bool = False  # vLLM --cold-compile (plan's profiling peak)
    hipblaslt: bool = True  # ROCm: --no-hipblaslt (plan's non-torch memory)
    language_model_only: bool = False  # vLLM --language-model-only (no vision tower)
    entrypoint: str = "serve"  # serve or offline (vLLM's LLM() class: plan's token budget)
    limit_mm_per_prompt: tuple[tuple[str, int], ...] | None = None  # vLLM items a prompt
    enable_extensible_kv_cache: bool | None = None  # vLLM 0.34+ (plan's KV sizing path)
    gpu_memory_in_use_gib: float = 0.0  # --gpu-memory-in-use (plan's shared_gpu)
    moe_runner_backend: str = "auto"  # SGLang --moe-runner-backend (plan's expert bytes)
    shared_expert_tp1: bool = False  # SGLang --shared-expert-tp1 (plan's shared experts)
    max_lora_rank: int = 0  # vLLM --enable-lora --max-lora-rank; 0: no slots (plan's weights)
    max_loras: int = 1  # vLLM --max-loras (plan's LoRA slots)
    attention_backend: str | None = None  # vLLM --attention-backend (plan's block size)
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    # speculative decoding: vLLM's --speculative-config JSON, kvscope's acceptance model and
    # the seed of its draws (the workload's --seed)
    speculative_config: str | None = None
    spec_acceptance: str | None = None
    spec_seed: int = 0

    def __post_init__(self) -> None:
        """Every field checked once here, so the CLI, ``--sweep`` points and library callers
        all get the same one-line errors (a sweep value such as ``nan`` included)."""
        for name, flag in _CHOICE_FLAGS.items():
            value = getattr(self, name)
            allowed = _CHOICES[name]
            if value not in allowed:
                raise KvscopeError(f"--{flag} must be {_or(allowed)}, got '{value}'.")
        count(self.tp, "--tensor-parallel-size", low=1, high=MAX_TP)
        if self.cost_model == "aic":
            from importlib.util import find_spec

            if find_spec("aiconfigurator_core") is None:
                raise KvscopeError(
                    "--cost-model aic needs AIConfigurator: install kvscope[aic] "
                    "(pip install 'kvscope[aic]')."
                )
        _ = self.parallelism  # the planner's checks: sizes, --num-gpus, DP attention vs TP
        count(self.dp, "--data-parallel-size", low=1, high=MAX_DP_REPLICAS)
        if self.engine_version is not None:
            from kvscope.plan.config import parse_version

            parse_version(self.engine_version)
        for name in ("gpu_memory_utilization", "mem_fraction_static"):
            value = getattr(self, name)
            if value is not None:
                finite(value, _flag(name), low=0, low_open=True, high=1)
        for name, low in _COUNT_FLAGS.items():
            value = getattr(self, name)
            if value is not None:
                count(value, _flag(name), low=low)
        if self.block_size is not None:
            count(self.block_size, "--block-size", low=1, high=MAX_TOKENS)
        if self.cpu_offload_gib is not None:
            finite(self.cpu_offload_gib, "--cpu-offload-gib", low=0, high=MAX_CPU_OFFLOAD_GIB)
        finite(self.gpu_memory_in_use_gib, "--gpu-memory-in-use", low=0)
        finite(self.sample_interval_s, "--step-resolution-s", low=0)
        if 0 < self.sample_interval_s < MIN_SAMPLE_INTERVAL_S:
            # 0 samples every step; a positive interval below a microsecond only divides the
            # clock into more sample slots than a float can count (1e-320 overflows).
            raise KvscopeError(
                f"--step-resolution-s must be 0 (every step) or at least "
                f"{MIN_SAMPLE_INTERVAL_S:g} s, not {self.sample_interval_s:g}."
            )
        finite(self.compaction_interval_s, "compaction_interval_s", low=0, low_open=True)
        count(self.compaction_batch, "compaction_batch", low=1)
        for name, flag in (("slo_ttft_s", "--slo-ttft-s"), ("slo_tpot_s", "--slo-tpot-s")):
            value = getattr(self, name)
            if value is not None:
                finite(value, flag, low=0, low_open=True)
        self.spec_decode()

    def spec_decode(self) -> SpecDecodeConfig | None:
        """The checked speculative-decoding model, or None when it is off."""
        if self.speculative_config is None:
            if self.spec_acceptance is not None:
                raise KvscopeError("--spec-acceptance needs --speculative-config.")
            return None
        if self.engine != "vllm" or self.allocator != "paged" or self.pp > 1 or self.dp > 1:
            raise KvscopeError(
                "--speculative-config is simulated for --engine vllm, the paged allocator and "
                "one pipeline stage and replica (--pp 1, --dp 1)."
            )
        return parse_spec_config(self.speculative_config, self.spec_acceptance, self.spec_seed)

    @property
    def parallelism(self) -> Any:
        """The layout as the planner takes it (:class:`kvscope.plan.config.Parallelism`),
        checked by the planner's own rules (one validation layer for plan and simulate)."""
        from kvscope.plan.config import Parallelism, resolve_parallel

        resolve_parallel(self.num_gpus, self.tp, self.pp, self.dp, self.enable_dp_attention)
        return Parallelism(
            tp=self.tp,
            pp=self.pp,
            dp=self.dp,
            ep=self.enable_expert_parallel,
            dp_attention=self.enable_dp_attention,
        )

    def with_flag(self, flag: str, value: str) -> SimConfig:
        """A copy with one ``--flag`` (as typed on the command line) set; used by sweeps."""
        name = flag.lstrip("-").replace("-", "_")
        name = _FIELD_OF_FLAG.get(name, name)
        if name not in self.__dataclass_fields__:
            raise KvscopeError(f"--sweep: unknown flag '{flag}'.")
        ann = str(self.__dataclass_fields__[name].type)
        try:
            if ann.startswith("bool"):
                v: Any = _bool(value)
            elif ann.startswith("float"):
                v = float(value)
            elif ann.startswith("int"):
                v = int(value)
            elif ann.startswith("tuple[tuple[str, int]"):
                from kvscope.plan.mm_limits import parse_limits

                v = parse_limits(value)
            elif ann.startswith("tuple[TierSpec"):
                from kvscope.sim.tier_spec import parse_offload

                v = parse_offload(value, f"--sweep {flag}")
            else:
                v = value
        except ValueError:
            raise KvscopeError(f"--sweep {flag}: '{value}' is not a valid value.") from None
        return replace(self, **{name: v})


#: Sweep flags whose SimConfig field has another name (the long and short spellings).
_FIELD_OF_FLAG = {
    "num_gpu_blocks": "num_gpu_blocks_override",
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "data_parallel_size": "dp",
    "gpu_memory_in_use": "gpu_memory_in_use_gib",
}
#: Most tensor-parallel ranks one replica may have (a bound for typos, far past real systems).
MAX_TP = 4096
#: Most DP replicas one simulation runs: each is a whole engine, stepped at every arrival, so
#: the cost grows with requests x replicas (the largest public DP deployments use tens).
MAX_DP_REPLICAS = 1024
#: Largest host KV tier (GiB): a pebibyte, past any host, so block counts stay finite.
MAX_CPU_OFFLOAD_GIB = 2**20
#: Smallest positive steps.parquet sample interval (s).
MIN_SAMPLE_INTERVAL_S = 1e-6
_CHOICES: dict[str, tuple[str, ...]] = {
    "engine": ("vllm", "sglang", "llama.cpp"),
    "scheduling_policy": ("fcfs", "priority"),
    "preemption_mode": ("recompute", "swap"),
    "allocator": ("paged", "contiguous"),
    "mode": ("span", "step"),
    "contiguous_growth": ("reserve-max", "grow"),
    "contiguous_fit": ("first", "best"),
    "compaction": ("immediate", "lazy", "none"),
    "cost_model": ("roofline", "fitted", "aic"),
    "window_model": ("bound", "exact"),
    "kv_offload_store": ("write-through", "write-back"),
}
_CHOICE_FLAGS = {
    "engine": "engine",
    "scheduling_policy": "scheduling-policy",
    "preemption_mode": "preemption-mode",
    "allocator": "allocator",
    "mode": "mode",
    "contiguous_growth": "contiguous-growth",
    "contiguous_fit": "contiguous-fit",
    "compaction": "compaction",
    "cost_model": "cost-model",
    "window_model": "window-model",
    "kv_offload_store": "kv-offload-store",
}
#: Integer flags and their least value (the pool-size check names too-small pools itself).
_COUNT_FLAGS = {
    "num_gpu_blocks_override": 0,
    "max_num_seqs": 1,
    "max_num_batched_tokens": 1,
    "max_model_len": 1,
    "ctx_size": 2,
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _or(values: tuple[str, ...]) -> str:
    return " or ".join(values) if len(values) <= 2 else ", ".join(values[:-1]) + " or " + values[-1]


def _bool(value: str) -> bool:
    text = value.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


@dataclass
class SimResult:
    config: SimConfig
    seqs: list[Sequence]
    stats: EngineStats
    pool_info: dict[str, Any]
    requests: pa.Table
    steps: pa.Table
    figures: dict[str, Any] = field(default_factory=dict)
    #: True when Ctrl-C stopped the engine: the tables hold what was served until then.
    interrupted: bool = False

    def write(
        self, out: str | Path, workload_spec: dict[str, Any] | None = None, *, force: bool = False
    ) -> Path:
        """Write the run directory (refused when ``out`` holds files, unless ``force``)."""
        cfg = {**asdict(self.config), "pool": self.pool_info, "workload": workload_spec or {}}
        figures = {**self.figures, "status": "interrupted"} if self.interrupted else self.figures
        return write_run_dir(out, cfg, self.requests, self.steps, figures, force=force)


class SimInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`simulate`; ``result`` is the partial run (``interrupted=True``)."""

    def __init__(self, result: SimResult) -> None:
        super().__init__("simulation interrupted")
        self.result = result


def simulate(
    workload: Workload,
    cfg: SimConfig,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Replay ``workload`` through the configured engine (``progress(done, total)`` is
    called now and then while it runs); ``--data-parallel-size`` N > 1 runs N replicas."""
    if cfg.dp > 1:
        from kvscope.sim.data_parallel_run import simulate_replicas

        return simulate_replicas(workload, cfg, progress)
    pool, layout, terms, info = build_pool(cfg)
    engine, alloc, coef = engine_for(workload, cfg, pool, layout, terms, info, progress)
    seqs = sequences_from(workload, layout.block_size)
    spec = engine.sched.spec
    if spec is not None:
        shift = spec.hash_lookahead(cfg.enable_prefix_caching)
        apply_hash_lookahead(seqs, layout.block_size, shift)
        info["speculative"] = spec.summary()
    interrupted = False
    try:
        stats = engine.run(seqs)
    except KeyboardInterrupt:
        stats, interrupted = engine.stats, True
        mark_interrupted(seqs)
    info.update(pool_counters(pool, alloc), cost=asdict(coef))
    req = requests_table(seqs, spec=spec is not None, tiers=pool.tiers is not None)
    steps = steps_table(stats.rows)
    figs = summary_figures(seqs, req, steps, stats, info, slo_targets(cfg))
    figs["cost_model"] = cost_summary(engine.cost, cfg)
    result = SimResult(cfg, seqs, stats, info, req, steps, figs, interrupted)
    if interrupted:
        raise SimInterrupted(result)
    return result


def engine_for(
    workload: Workload,
    cfg: SimConfig,
    pool: PagedPool,
    layout: KVLayout,
    terms: HardwareTerms,
    info: dict[str, Any],
    progress: Callable[[int, int], None] | None,
) -> tuple[Engine, BlockAllocator, CostCoefficients]:
    """One engine (scheduler, allocator, cost model) over ``pool``."""
    max_len = int(info["max_model_len"])
    # Under PP one simulated step is pp micro-batches (kvscope.sim.cost), each with the
    # engine's token budget.
    sched_cfg = SchedulerConfig(
        max_num_seqs=int(info["max_num_seqs"]),
        max_num_batched_tokens=int(info["max_num_batched_tokens"]) * cfg.pp,
        max_model_len=max_len,
        enable_chunked_prefill=cfg.enable_chunked_prefill,
        policy=cfg.scheduling_policy,
        preemption_mode=cfg.preemption_mode,
        swap_s_per_block=float(info["block_bytes"]) / terms.pcie_bandwidth,
        max_concurrent_batches=_batches_in_flight(cfg, info),
    )
    coef = CostCoefficients.load(cfg.cost_file) if cfg.cost_file else CostCoefficients()
    cost = cost_model_for(cfg, CostModel(terms, coef))
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
    spec = cfg.spec_decode()
    if cfg.engine == "sglang":
        from kvscope.sim.sglang import SglangScheduler

        sched: Scheduler = SglangScheduler(sched_cfg, alloc)
    else:
        sched = Scheduler(sched_cfg, alloc, spec)
        if spec is not None:
            cost.drafter = drafter_cost(spec, cfg, terms, coef)
    engine = Engine(
        sched,
        cost,
        mode=cfg.mode,
        sample_interval_s=cfg.sample_interval_s,
        on_progress=progress,
        request_s=coef.request_s,
    )
    return engine, alloc, coef


def pool_counters(pool: PagedPool, alloc: BlockAllocator) -> dict[str, Any]:
    return {
        "lookup_tokens": pool.counters.lookups_tokens,
        "hit_tokens": pool.counters.hit_tokens,
        "evicted_blocks": pool.counters.evictions,
        "moved_blocks": getattr(alloc, "moved_blocks", 0),
        "offload": pool.tiers.summary(pool.block_size) if pool.tiers is not None else None,
        "compactions": getattr(alloc, "compactions", 0),
    }


def mark_interrupted(seqs: list[Sequence]) -> None:
    for seq in seqs:
        if seq.status not in ("finished", "rejected"):
            seq.error = "interrupted (the simulation was stopped)"


def slo_targets(cfg: SimConfig) -> dict[str, float] | None:
    slo = {
        k: v for k, v in (("ttft_s", cfg.slo_ttft_s), ("tpot_s", cfg.slo_tpot_s)) if v is not None
    }
    return slo or None


def drafter_cost(
    spec: SpecDecodeConfig, cfg: SimConfig, terms: HardwareTerms, coef: CostCoefficients
) -> DrafterCost:
    """The drafter's step cost (see :class:`kvscope.sim.cost.DrafterCost`)."""
    from kvscope.specs.hardware import get_gpu
    from kvscope.specs.registry import load_model

    k = spec.num_speculative_tokens
    passes = 1 if spec.parallel_drafting else k
    if spec.method in ("ngram", "ngram_gpu", "suffix"):
        return DrafterCost(0)
    if spec.method == "draft_model":
        assert spec.model is not None
        draft = load_model(spec.model, dtype=cfg.dtype)
        tp = spec.draft_tensor_parallel_size or cfg.tp
        own = HardwareTerms.from_specs(
            draft, get_gpu(cfg.gpu), tp=tp, kv_cache_dtype=cfg.kv_cache_dtype
        )
        return DrafterCost(passes, model=CostModel(own, coef))
    layers = load_model(cfg.model, dtype=cfg.dtype, revision=cfg.revision).num_layers
    return DrafterCost(passes, fraction=1.0 / max(layers, 1))


def _batches_in_flight(cfg: SimConfig, info: dict[str, Any]) -> int:
    """Token budgets in flight that vLLM's window admission cap reserves for: the planner's
    ``in_flight_tokens`` (two budgets under async scheduling, vLLM 0.26+) over the simulated
    step's budget (a PP step already holds ``pp`` micro-batches); 1 for SGLang and llama.cpp."""
    in_flight = int(info.get("in_flight_tokens") or 0)
    if cfg.engine != "vllm" or not in_flight:
        return 1
    return max(1, in_flight // (int(info["max_num_batched_tokens"]) * cfg.pp))
