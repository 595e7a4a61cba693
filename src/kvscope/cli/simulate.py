"""``kvscope simulate``: replay a workload through a simulated paged-KV serving engine.

Flags mirror vLLM's (``--block-size``, ``--max-num-seqs``, ``--num-gpu-blocks-override``,
...); the workload flags are the shared ones from :mod:`kvscope.cli.workload`.
``--sweep FLAG=V1,V2`` (repeatable) runs the cartesian product, one run directory per point,
and prints a comparison table. Library code lives in :mod:`kvscope.sim`.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated, Any

import typer

from kvscope.cli.cost_options import CostModelOpt, GpuSpecFile
from kvscope.cli.engine_options import (
    AttentionBackend,
    ColdCompile,
    DecodeContextParallelSize,
    DisableCustomAllReduce,
    EnableLora,
    Entrypoint,
    ExtensibleKvCache,
    GpuMemoryInUse,
    KvCacheDtype,
    LanguageModelOnly,
    LimitMmPerPrompt,
    MaxLoraRank,
    MaxLoras,
    MmEncoderTpMode,
    MoeRunnerBackend,
    NoHipblaslt,
    SharedExpertTp1,
    lora_rank,
    mm_limits,
)
from kvscope.cli.executor_options import RayOpt, WorkersOpt
from kvscope.cli.fleet_options import Autoscale, ClusterFile, Replicas, Router, RouterWeights
from kvscope.cli.offload_options import KvOffloadOpt, KvOffloadStoreOpt, KvTiersOpt, offload_config
from kvscope.cli.output import print_json, stderr, stdout
from kvscope.cli.parallel_options import (
    AsyncScheduling,
    DataParallelSize,
    EnableDpAttention,
    EnableExpertParallel,
    EngineVersion,
    NumGpus,
    PipelineParallelSize,
    TensorParallelSize,
)
from kvscope.cli.simulate_run import run_points, stopped
from kvscope.cli.simulate_table import print_table
from kvscope.cli.spec_options import SpeculativeConfig
from kvscope.cli.workload import (
    ArrivalOpt,
    DurationOpt,
    FormatOpt,
    JsonOpt,
    NumRequestsOpt,
    OutputLenOpt,
    PromptLenOpt,
    SeedOpt,
    SpeedupOpt,
    WorkloadOpt,
)
from kvscope.errors import KvscopeError


def _parse_sweeps(sweeps: list[str]) -> list[tuple[str, list[str]]]:
    out = []
    for item in sweeps:
        flag, sep, values = item.partition("=")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not flag.strip() or not vals:
            raise KvscopeError(
                f"--sweep '{item}': expected FLAG=V1,V2,... (e.g. block-size=16,32)."
            )
        out.append((flag.strip(), vals))
    return out


def simulate(
    model: Annotated[str, typer.Option("--model", help="Preset id/alias or config.json.")] = (
        "meta-llama/Llama-3.1-8B"
    ),
    gpu: Annotated[str, typer.Option("--gpu", help="GPU name (see `kvscope gpus`).")] = "H100",
    gpu_spec_file: GpuSpecFile = None,
    # Parallel layout: the flags and help of `kvscope plan` (cli/parallel_options.py).
    tp: TensorParallelSize = None,
    pp: PipelineParallelSize = 1,
    dp: DataParallelSize = 1,
    enable_expert_parallel: EnableExpertParallel = False,
    enable_dp_attention: EnableDpAttention = False,
    num_gpus: NumGpus = None,
    engine_version: EngineVersion = None,
    async_scheduling: AsyncScheduling = None,
    decode_context_parallel_size: DecodeContextParallelSize = 1,
    mm_encoder_tp_mode: MmEncoderTpMode = "weights",
    disable_custom_all_reduce: DisableCustomAllReduce = False,
    cold_compile: ColdCompile = False,
    no_hipblaslt: NoHipblaslt = False,
    language_model_only: LanguageModelOnly = False,
    entrypoint: Entrypoint = "serve",
    limit_mm_per_prompt: LimitMmPerPrompt = None,
    enable_extensible_kv_cache: ExtensibleKvCache = None,
    gpu_memory_in_use: GpuMemoryInUse = 0.0,
    moe_runner_backend: MoeRunnerBackend = "auto",
    attention_backend: AttentionBackend = None,
    shared_expert_tp1: SharedExpertTp1 = False,
    enable_lora: EnableLora = False,
    max_lora_rank: MaxLoraRank = 16,
    max_loras: MaxLoras = 1,
    replicas: Replicas = None,
    router: Router = None,
    router_weights: RouterWeights = None,
    cluster: ClusterFile = None,
    autoscale: Autoscale = None,
    revision: Annotated[
        str | None,
        typer.Option(
            "--revision",
            help="Hugging Face model revision: branch, tag or commit.",
            show_default="main",
        ),
    ] = None,
    dtype: Annotated[
        str | None,
        typer.Option(
            "--dtype",
            help="Model dtype (auto, bfloat16, float16).",
            show_default="the model config's",
        ),
    ] = None,
    kv_cache_dtype: KvCacheDtype = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine", help="vllm (v1 scheduler), sglang (prefill-first) or llama.cpp (slots)."
        ),
    ] = "vllm",
    gpu_memory_utilization: Annotated[
        float | None,
        typer.Option(
            "--gpu-memory-utilization",
            help="Share of GPU memory vLLM may use.",
            show_default="0.92 from vLLM 0.20, 0.9 before",
        ),
    ] = None,
    mem_fraction_static: Annotated[
        float | None,
        typer.Option(
            "--mem-fraction-static",
            help="SGLang's share of GPU memory for weights and KV.",
            show_default="SGLang's, by GPU memory and TP",
        ),
    ] = None,
    block_size: Annotated[
        int | None,
        typer.Option(
            "--block-size",
            help="Tokens per KV block (SGLang: page size).",
            show_default="the attention backend's, 16 for most vLLM models, 1 for SGLang",
        ),
    ] = None,
    num_gpu_blocks: Annotated[
        int | None,
        typer.Option(
            "--num-gpu-blocks-override",
            "--num-gpu-blocks",
            help="KV pool size in blocks (vLLM's --num-gpu-blocks-override).",
            show_default="sized from GPU memory, as the engine does",
        ),
    ] = None,
    max_num_seqs: Annotated[
        int | None,
        typer.Option(
            "--max-num-seqs",
            help="Most requests running at once.",
            show_default="vLLM's, 1024 on GPUs of 70 GiB or more except A100, else 256",
        ),
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-num-batched-tokens",
            help="Token budget of one engine step.",
            show_default="vLLM's, 8192 on GPUs of 70 GiB or more except A100, else 2048",
        ),
    ] = None,
    max_model_len: Annotated[
        int | None,
        typer.Option(
            "--max-model-len",
            help="Longest request accepted (prompt + output tokens).",
            show_default="the model's max_position_embeddings",
        ),
    ] = None,
    ctx_size: Annotated[
        int | None,
        typer.Option("--ctx-size", help="llama.cpp's -c: KV tokens over all slots (llama.cpp)."),
    ] = None,
    prefix_caching: Annotated[
        bool,
        typer.Option(
            "--enable-prefix-caching/--no-enable-prefix-caching",
            help="Reuse the KV blocks of prompt prefixes seen before.",
        ),
    ] = True,
    chunked_prefill: Annotated[
        bool,
        typer.Option(
            "--enable-chunked-prefill/--no-enable-chunked-prefill",
            help="Split long prompts across engine steps.",
        ),
    ] = True,
    cpu_offload_gib: Annotated[
        float | None,
        typer.Option("--cpu-offload-gib", help="Size of the CPU KV offload tier (GiB; 0: none)."),
    ] = None,
    kv_offload: KvOffloadOpt = None,
    kv_tiers: KvTiersOpt = None,
    kv_offload_store: KvOffloadStoreOpt = None,
    window_model: Annotated[
        str,
        typer.Option(
            "--window-model",
            help="Sliding-window/V4 window groups: bound (fast) or exact (vLLM's hybrid "
            "manager, step for step; slower on DeepSeek V4).",
        ),
    ] = "bound",
    policy: Annotated[str, typer.Option("--scheduling-policy", help="fcfs or priority.")] = (
        "fcfs"
    ),
    preemption_mode: Annotated[
        str, typer.Option("--preemption-mode", help="recompute (vLLM v1) or swap (vLLM v0).")
    ] = "recompute",
    allocator: Annotated[str, typer.Option("--allocator", help="paged or contiguous.")] = ("paged"),
    mode: Annotated[
        str, typer.Option("--mode", help="span (fast) or step (one engine step at a time).")
    ] = "span",
    resolution: Annotated[
        float, typer.Option("--step-resolution-s", help="steps.parquet sample interval (s).")
    ] = 0.1,
    cost_file: Annotated[
        Path | None,
        typer.Option("--cost", help="Cost coefficients JSON (OUT/cost.json of --calibrate)."),
    ] = None,
    cost_model: CostModelOpt = "roofline",
    calibrate: Annotated[
        Path | None,
        typer.Option("--calibrate", help="Fit cost coefficients from a bench run directory."),
    ] = None,
    slo_ttft: Annotated[
        float | None,
        typer.Option("--slo-ttft-s", help="Time-to-first-token target (s) for SLO attainment."),
    ] = None,
    slo_tpot: Annotated[
        float | None,
        typer.Option("--slo-tpot-s", help="Time-per-output-token target (s) for SLO attainment."),
    ] = None,
    speculative_config: SpeculativeConfig = None,
    spec_acceptance: Annotated[
        str | None,
        typer.Option(
            "--spec-acceptance",
            help="Draft acceptance: a rate in [0,1], k comma-separated per-position rates "
            "(each given the previous accepted), or a file (JSON list, vLLM counters).",
        ),
    ] = None,
    sweep: Annotated[
        list[str] | None, typer.Option("--sweep", help="FLAG=V1,V2 (repeatable).")
    ] = None,
    ray: RayOpt = None,
    workers: WorkersOpt = None,
    workload: WorkloadOpt = None,
    arrival: ArrivalOpt = None,
    prompt_len: PromptLenOpt = None,
    output_len: OutputLenOpt = None,
    duration: DurationOpt = None,
    num_requests: NumRequestsOpt = None,
    speedup: SpeedupOpt = None,
    seed: SeedOpt = None,
    fmt: FormatOpt = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Run directory to write (with --calibrate: holds cost.json)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace --out when it already holds a run.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Replay a workload through a simulated vLLM-like engine: KV usage, preemptions, latency."""
    from kvscope.cli.cost_options import show_cost_warnings
    from kvscope.cli.workload import build_from_flags
    from kvscope.plan.config import resolve_parallel
    from kvscope.sim import SimConfig
    from kvscope.specs.user_gpus import use_gpu_file
    from kvscope.validate import fresh_run_dir

    use_gpu_file(gpu_spec_file)
    tp, pp, dp = resolve_parallel(num_gpus, tp, pp, dp, enable_dp_attention)
    # SimConfig checks every field (choices, NaN, ranges) with the flag's name.
    cfg = SimConfig(
        engine=engine,  # type: ignore[arg-type]
        model=model,
        revision=revision,
        gpu=gpu,
        tp=tp,
        pp=pp,
        dp=dp,
        enable_expert_parallel=enable_expert_parallel,
        enable_dp_attention=enable_dp_attention,
        num_gpus=num_gpus,
        engine_version=engine_version,
        async_scheduling=async_scheduling,
        decode_context_parallel_size=decode_context_parallel_size,
        mm_encoder_tp_mode=mm_encoder_tp_mode,
        disable_custom_all_reduce=disable_custom_all_reduce,
        cold_compile=cold_compile,
        hipblaslt=not no_hipblaslt,
        language_model_only=language_model_only,
        entrypoint=entrypoint,
        limit_mm_per_prompt=mm_limits(limit_mm_per_prompt),
        enable_extensible_kv_cache=enable_extensible_kv_cache,
        gpu_memory_in_use_gib=gpu_memory_in_use,
        moe_runner_backend=moe_runner_backend,
        attention_backend=attention_backend,
        shared_expert_tp1=shared_expert_tp1,
        max_lora_rank=lora_rank(enable_lora, max_lora_rank),
        max_loras=max_loras,
        dtype=dtype,
        kv_cache_dtype=kv_cache_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        mem_fraction_static=mem_fraction_static,
        block_size=block_size,
        num_gpu_blocks_override=num_gpu_blocks,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        ctx_size=ctx_size,
        enable_prefix_caching=prefix_caching,
        enable_chunked_prefill=chunked_prefill,
        cpu_offload_gib=cpu_offload_gib,
        **offload_config(kv_offload, kv_tiers, kv_offload_store),
        window_model=window_model,  # type: ignore[arg-type]
        scheduling_policy=policy,  # type: ignore[arg-type]
        preemption_mode=preemption_mode,  # type: ignore[arg-type]
        allocator=allocator,  # type: ignore[arg-type]
        mode=mode,  # type: ignore[arg-type]
        sample_interval_s=resolution,
        cost_file=str(cost_file) if cost_file else None,
        cost_model=cost_model,
        slo_ttft_s=slo_ttft,
        slo_tpot_s=slo_tpot,
        speculative_config=speculative_config,
        spec_acceptance=spec_acceptance,
        spec_seed=seed or 0,
    )
    show_cost_warnings()
    from kvscope.cli.fleet_options import fleet_config

    fleet = (replicas, router, router_weights, cluster, autoscale, sweep, seed, bool(calibrate))
    cfg = fleet_config(cfg, *fleet)  # a FleetConfig when any fleet flag is given
    if calibrate is not None:
        from kvscope.cli.simulate_calibrate import calibrate_into

        calibrate_into(calibrate, cfg, out, force, json_out)
        return
    points, labels = _points(cfg, sweep)
    backend = _backend(sweep, ray, workers)
    if out is not None and sweep:
        from kvscope.cli.simulate_sweep import check_sweep_out

        check_sweep_out(out, force)  # a sweep of the same points resumes
    elif out is not None:
        # Before minutes of simulation: an earlier run there is refused (or, with --force,
        # cleared), never mixed with this one.
        fresh_run_dir(out, force=force)
    try:
        w = build_from_flags(
            workload,
            arrival,
            prompt_len,
            output_len,
            duration,
            num_requests,
            speedup,
            seed,
            max_model_len,
            fmt,
            False,
        )
    except KeyboardInterrupt:
        # Ctrl-C while the workload was built: the config is what is known (--out is empty).
        stopped(None, out, cfg, {})
    if sweep:
        from kvscope.cli.simulate_sweep import run_sweep

        results = run_sweep(points, labels, w, out, backend, stderr)
    else:
        results = run_points(points, labels, w, out)
    if json_out:
        print_json(results if sweep else results[0])
        return
    print_table(results, bool(sweep), stdout)


def _backend(sweep: list[str] | None, ray: str | None, workers: int | None) -> Any:
    """Where a sweep's points run; --ray and --workers without --sweep are refused."""
    from kvscope.executor import parse_backend

    if not sweep and (ray is not None or workers is not None):
        raise KvscopeError("--ray and --workers run the points of a --sweep; add --sweep.")
    backend = parse_backend(ray, workers)
    if backend.kind == "ray":
        from kvscope.executor.ray_backend import connect

        connect(backend.address or "auto")
    return backend


def _points(cfg: Any, sweep: list[str] | None) -> tuple[list[Any], list[str]]:
    """The configurations to simulate, each checked (pool sized, cost file read) before any
    simulation starts, so a bad point ends the command at once, not after the earlier ones."""
    from kvscope.cli.fleet_options import check_point
    from kvscope.sim.cost import CostCoefficients

    points, labels = [cfg], [""]
    if sweep:
        axes = _parse_sweeps(sweep)
        points, labels = [], []
        for combo in itertools.product(*[[(f, v) for v in vals] for f, vals in axes]):
            point_cfg = cfg
            for flag, value in combo:
                point_cfg = point_cfg.with_flag(flag, value)
            points.append(point_cfg)
            labels.append(",".join(f"{f.lstrip('-')}={v}" for f, v in combo))
    for point in points:
        check_point(point)
    if cfg.cost_file:
        CostCoefficients.load(cfg.cost_file)
    return points, labels
