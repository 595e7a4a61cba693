"""``kvscope plan``: per-GPU memory budget and KV capacity as the engine will report them.

Thin layer: parses the engines' own flags, calls :func:`kvscope.plan.memory.plan_memory`
and :func:`kvscope.plan.advice.advise`, prints a table or one JSON object. Library imports
sit inside the command so ``kvscope plan --json`` starts fast.
"""

from __future__ import annotations

from typing import Any

import typer

from kvscope.cli.cost_options import CostModelOpt, GpuHourPrice, GpuSpecFile, PricesFile, Provider
from kvscope.cli.engine_options import (
    AttentionBackend,
    ColdCompile,
    CudagraphMemory,
    DecodeContextParallelSize,
    DisableCustomAllReduce,
    EnableLora,
    EnforceEager,
    Entrypoint,
    ExtensibleKvCache,
    FlashinferSampler,
    FlopsEfficiency,
    GpuMemoryInUse,
    HbmEfficiency,
    KvCacheDtype,
    KvTransferConfig,
    LanguageModelOnly,
    LimitMmPerPrompt,
    MambaCacheMode,
    MaxCudagraphCaptureSize,
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
from kvscope.cli.plan_search import search as _search
from kvscope.cli.plan_search import warn as _warn
from kvscope.cli.spec_options import (
    SpeculativeAlgorithm,
    SpeculativeConfig,
    SpeculativeDraftModelPath,
    SpeculativeEagleTopk,
    SpeculativeNumDraftTokens,
    SpeculativeNumSteps,
    resolve_speculative,
)
from kvscope.cli.workload import (
    ArrivalOpt,
    NumRequestsOpt,
    OutputLenOpt,
    PromptLenOpt,
    SeedOpt,
    SpeedupOpt,
    WorkloadOpt,
)
from kvscope.errors import KvscopeError

#: Default the help states where the option itself defaults to "not given" (None); tests
#: check it against kvscope.plan.performance.TYPICAL_CONTEXT_TOKENS (not imported here:
#: start-up time).
_TYPICAL = "8,192"


def plan(
    model: str = typer.Option(
        ...,
        "--model",
        help="Preset id or alias, a config.json, a model folder, or a Hugging Face id "
        "(read from the HF cache, else its config files fetched from the Hub).",
    ),
    gpu: str | None = typer.Option(
        None,
        "--gpu",
        help="GPU name, any spelling `kvscope gpus` takes; required unless --search, where "
        "it limits the search [default: every GPU].",
    ),
    num_gpus: NumGpus = None,
    tensor_parallel_size: TensorParallelSize = None,
    pipeline_parallel_size: PipelineParallelSize = 1,
    data_parallel_size: DataParallelSize = 1,
    enable_expert_parallel: EnableExpertParallel = False,
    enable_dp_attention: EnableDpAttention = False,
    speculative_config: SpeculativeConfig = None,
    speculative_algorithm: SpeculativeAlgorithm = None,
    speculative_num_steps: SpeculativeNumSteps = None,
    speculative_eagle_topk: SpeculativeEagleTopk = None,
    speculative_num_draft_tokens: SpeculativeNumDraftTokens = None,
    speculative_draft_model_path: SpeculativeDraftModelPath = None,
    dtype: str | None = typer.Option(
        None, "--dtype", help="Model dtype [default: auto, the config's torch_dtype]."
    ),
    quantization: str | None = typer.Option(
        None,
        "--quantization",
        help="Weight quantization, e.g. fp8 or awq [default: the config's, else none].",
    ),
    revision: str | None = typer.Option(
        None,
        "--revision",
        help="Hugging Face model revision: branch, tag or commit [default: main].",
    ),
    kv_cache_dtype: KvCacheDtype = None,
    gpu_memory_utilization: float | None = typer.Option(
        None,
        "--gpu-memory-utilization",
        help="vLLM: fraction of GPU memory the engine may use [default: 0.9].",
    ),
    mem_fraction_static: float | None = typer.Option(
        None,
        "--mem-fraction-static",
        help="SGLang: fraction for weights and KV pool [default: SGLang's rule by GPU and TP].",
    ),
    max_model_len: int | None = typer.Option(
        None,
        "--max-model-len",
        help="Longest request in tokens [default: the model's max_position_embeddings].",
    ),
    max_num_seqs: int | None = typer.Option(
        None,
        "--max-num-seqs",
        help="Most requests running at once [default: the engine release's].",
    ),
    max_num_batched_tokens: int | None = typer.Option(
        None,
        "--max-num-batched-tokens",
        help="Tokens per engine step, the prefill chunk [default: the engine release's].",
    ),
    block_size: int | None = typer.Option(
        None, "--block-size", help="KV block (page) size in tokens [default: the engine's]."
    ),
    kv_cache_memory_bytes: int | None = typer.Option(
        None,
        "--kv-cache-memory-bytes",
        help="vLLM: KV budget in bytes, skips the profile [default: from the memory fraction].",
    ),
    engine: str = typer.Option("vllm", "--engine", help="Engine: vllm or sglang."),
    cost_model: CostModelOpt = "roofline",
    engine_version: EngineVersion = None,
    async_scheduling: AsyncScheduling = None,
    enforce_eager: EnforceEager = False,
    cudagraph_memory: CudagraphMemory = None,
    enable_extensible_kv_cache: ExtensibleKvCache = None,
    max_cudagraph_capture_size: MaxCudagraphCaptureSize = None,
    flashinfer_sampler: FlashinferSampler = None,
    kv_transfer_config: KvTransferConfig = None,
    decode_context_parallel_size: DecodeContextParallelSize = 1,
    mm_encoder_tp_mode: MmEncoderTpMode = "weights",
    disable_custom_all_reduce: DisableCustomAllReduce = False,
    cold_compile: ColdCompile = False,
    no_hipblaslt: NoHipblaslt = False,
    language_model_only: LanguageModelOnly = False,
    entrypoint: Entrypoint = "serve",
    limit_mm_per_prompt: LimitMmPerPrompt = None,
    gpu_memory_in_use: GpuMemoryInUse = 0.0,
    mamba_cache_mode: MambaCacheMode = "none",
    moe_runner_backend: MoeRunnerBackend = "auto",
    attention_backend: AttentionBackend = None,
    shared_expert_tp1: SharedExpertTp1 = False,
    enable_lora: EnableLora = False,
    max_lora_rank: MaxLoraRank = 16,
    max_loras: MaxLoras = 1,
    context: int | None = typer.Option(
        None,
        "--context",
        help="Tokens per request for the --max-num-seqs advice [default: --max-model-len].",
    ),
    search: bool = typer.Option(
        False,
        "--search",
        help="Rank (GPU, count, TP/PP/DP/EP, KV dtype) by $/M output tokens [default: off].",
    ),
    target_context: int | None = typer.Option(
        None,
        "--target-context",
        help="Prompt + output tokens per request that the speed and $/M-token figures assume, "
        "and --search ranks at [default: --context, else --max-model-len capped at "
        f"{_TYPICAL}; --search: {_TYPICAL}].",
    ),
    target_concurrency: int | None = typer.Option(
        None,
        "--target-concurrency",
        help="Requests served at once, all replicas; required by --search [default: as many "
        "as the KV cache holds, capped by --max-num-seqs].",
    ),
    gpu_hour_price: GpuHourPrice = None,
    prices_file: PricesFile = None,
    provider: Provider = None,
    gpu_spec_file: GpuSpecFile = None,
    hbm_efficiency: HbmEfficiency = 0.8,
    flops_efficiency: FlopsEfficiency = 0.45,
    comm_run: str | None = typer.Option(
        None,
        "--comm-run",
        help="A `kvscope comm bench` run directory: its fitted link for TP all-reduces "
        "(warns when it is not the GPU's link) [default: the catalogue's NVLink/PCIe].",
    ),
    simulate_top: int | None = typer.Option(
        None,
        "--simulate-top",
        help="With --search: simulate the K cheapest under the workload flags (--workload, "
        "--arrival, ...) and --slo, steps priced by --cost-model, through --workers / --ray "
        "[default: off].",
    ),
    slo: str | None = typer.Option(
        None, "--slo", help="With --simulate-top: targets, e.g. ttft_p99=0.5,tpot_p99=50ms."
    ),
    workload: WorkloadOpt = None,
    arrival: ArrivalOpt = None,
    prompt_len: PromptLenOpt = None,
    output_len: OutputLenOpt = None,
    num_requests: NumRequestsOpt = None,
    speedup: SpeedupOpt = None,
    seed: SeedOpt = None,
    ray: RayOpt = None,
    workers: WorkersOpt = None,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object [default: off]."),
    out: str | None = typer.Option(
        None, "--out", help="Also write a run directory (summary.json, kind plan) [default: none]."
    ),
    force: bool = typer.Option(
        False, "--force", help="Replace --out when it already holds a run [default: off]."
    ),
) -> None:
    """Predict the weights, KV cache and concurrency vLLM/SGLang will report, per GPU.

    Speed and cost figures assume --target-context tokens per request (default: the
    max-model-len capped at 8,192) and say so next to each figure. The price per GPU-hour
    of each GPU is the first that names it: --gpu-hour-price, then the prices file
    (--prices, else $XDG_CONFIG_HOME/kvscope/prices.yaml or ~/.config/kvscope/prices.yaml
    when it exists), then kvscope's default estimate (`kvscope gpus` lists each price with
    its source). The output says which price it used and where it came from.
    """
    from kvscope.plan.advice import advise
    from kvscope.plan.config import EngineConfig, Parallelism, resolve_parallel
    from kvscope.plan.memory import plan_memory
    from kvscope.plan.prices import resolve_prices
    from kvscope.specs.hardware import get_gpu
    from kvscope.specs.registry import load_model
    from kvscope.specs.user_gpus import use_gpu_file

    _check_request_flags(context, target_context, target_concurrency)
    use_gpu_file(gpu_spec_file)
    prices = resolve_prices(gpu_hour_price, prices_file, provider)
    if search and out is not None:
        raise KvscopeError(
            "--out writes the run of one plan; --search ranks many and writes none.",
            "Drop --out, or plan the chosen deployment without --search.",
        )
    if out is not None:
        _check_out(out, force)
    tp, pp, dp = resolve_parallel(
        num_gpus,
        tensor_parallel_size,
        pipeline_parallel_size,
        data_parallel_size,
        enable_dp_attention,
    )
    spec = load_model(model, dtype, quantization, revision)
    speculative = resolve_speculative(
        engine,
        speculative_config,
        speculative_algorithm,
        speculative_num_steps,
        speculative_eagle_topk,
        speculative_num_draft_tokens,
        speculative_draft_model_path,
        spec,
    )
    eng = EngineConfig(
        engine=engine,
        engine_version=engine_version,
        async_scheduling=async_scheduling,
        gpu_memory_utilization=gpu_memory_utilization,
        mem_fraction_static=mem_fraction_static,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size,
        kv_cache_dtype=kv_cache_dtype,
        enforce_eager=enforce_eager,
        cudagraph_memory=cudagraph_memory,
        enable_extensible_kv_cache=enable_extensible_kv_cache,
        max_cudagraph_capture_size=max_cudagraph_capture_size,
        flashinfer_sampler=flashinfer_sampler,
        kv_transfer=_kv_transfer(kv_transfer_config),
        kv_cache_memory_bytes=kv_cache_memory_bytes,
        speculative=speculative,
        decode_context_parallel_size=decode_context_parallel_size,
        mm_encoder_tp_mode=mm_encoder_tp_mode,
        disable_custom_all_reduce=disable_custom_all_reduce,
        cold_compile=cold_compile,
        hipblaslt=not no_hipblaslt,
        language_model_only=language_model_only,
        entrypoint=entrypoint,
        limit_mm_per_prompt=mm_limits(limit_mm_per_prompt),
        gpu_memory_in_use_gib=gpu_memory_in_use,
        mamba_cache_mode=mamba_cache_mode,
        moe_runner_backend=moe_runner_backend,
        attention_backend=attention_backend,
        shared_expert_tp1=shared_expert_tp1,
        max_lora_rank=lora_rank(enable_lora, max_lora_rank),
        max_loras=max_loras,
    )
    from kvscope.plan.roofline import Efficiency

    eff = Efficiency(hbm=hbm_efficiency, flops=flops_efficiency)
    sim = None
    if simulate_top is not None or workload is not None or arrival is not None:
        if simulate_top is None or not search:
            raise KvscopeError("--simulate-top K (with --search) takes the workload flags.")
        sim = {
            "k": simulate_top,
            "model": model,
            "cost_model": cost_model,
            "slo": slo,
            "ray": ray,
            "workers": workers,
            "wl": (
                workload,
                arrival,
                prompt_len,
                output_len,
                None,
                num_requests,
                speedup,
                seed,
                None,
                None,
                False,
            ),
        }
    if search:
        _search(
            spec,
            gpu,
            num_gpus,
            eng,
            target_context,
            target_concurrency,
            prices,
            eff,
            as_json,
            sim,
        )
        return
    if gpu is None:
        raise KvscopeError("--gpu is required.", "Name a GPU (see `kvscope gpus`) or use --search.")
    gpu_spec = get_gpu(gpu)
    par = Parallelism(
        tp=tp, pp=pp, dp=dp, ep=enable_expert_parallel, dp_attention=enable_dp_attention
    )
    memory = plan_memory(spec, gpu_spec, par, eng)
    if target_context is not None and target_context > memory.max_model_len:
        raise KvscopeError(
            f"--target-context {target_context} is longer than the max-model-len "
            f"{memory.max_model_len}: no request can hold it.",
            "Raise --max-model-len or lower --target-context.",
        )
    from kvscope.specs.registry import local_config

    model_id = model if local_config(model) is not None else spec.name
    advice = advise(spec, gpu_spec, par, eng, memory, model_id, context)
    from kvscope.plan import shared_gpu

    if not memory.fits:
        hint = "Lower --max-model-len or raise the memory fraction."
        longest = advice.largest_max_model_len
        if shared_gpu.MARK in (memory.problem or ""):
            hint = shared_gpu.HINT
        elif (memory.problem or "").startswith("--kv-cache-memory-bytes"):
            hint = "Lower --kv-cache-memory-bytes, or drop it to let vLLM size the cache."
        elif longest and advice.smallest_fit:
            # What vLLM's own error offers ("the estimated maximum model length is N"),
            # and the layout that keeps the requested length.
            hint = f"Try --max-model-len {longest} (the most that fits), or {advice.smallest_fit}."
        elif advice.smallest_fit:
            hint = f"Try {advice.smallest_fit}."
        elif longest:
            hint = f"Try --max-model-len {longest} or more GPUs."
        raise KvscopeError(f"{spec.name} does not fit on {gpu_spec.name}: {memory.problem}", hint)
    _warn(memory.warnings)  # after the last refusal: an error stays one line
    from kvscope.cli import plan_perf

    perf = plan_perf.plan_performance(
        spec,
        gpu_spec,
        par,
        memory,
        target_context,
        target_concurrency,
        prices,
        eff,
        comm_run,
        context,
    )
    _warn(perf.warnings)
    from kvscope.cli import plan_cost_models

    steps = plan_cost_models.step_models(spec, gpu_spec, par, memory, perf, eng.engine, cost_model)
    if as_json or out:
        from kvscope.cli.output import print_json, to_jsonable

        doc: dict[str, Any] = to_jsonable(memory)
        doc["advice"] = to_jsonable(advice)
        doc.update(plan_perf.performance_json(perf))
        doc["step_models"] = steps
        doc["warnings"] = [*doc.get("warnings", ()), *perf.warnings]
        if out:
            from kvscope.results import RunDir

            config = {
                "model": spec.name,
                "gpu": gpu_spec.name,
                "parallelism": to_jsonable(par),
                "engine": to_jsonable(eng),
            }
            RunDir(out, "plan", force=force).write_summary(config, doc)
        if as_json:
            print_json(doc)
            return
    from kvscope.cli.plan_table import print_memory_table

    print_memory_table(memory, advice)
    from kvscope.cli.output import stdout

    stdout.print(plan_perf.performance_table(perf))
    stdout.print(plan_cost_models.step_models_table(steps))


def _check_request_flags(
    context: int | None, target_context: int | None, target_concurrency: int | None
) -> None:
    """Token and request counts typed by hand: at least 1 and within what an engine holds
    (a zero used to be read as "not given" and a negative count as one request)."""
    from kvscope.plan.config import MAX_TOKENS
    from kvscope.validate import count

    for value, flag in ((context, "--context"), (target_context, "--target-context")):
        if value is not None:
            count(value, flag, low=1, high=MAX_TOKENS)
    if target_concurrency is not None:
        count(target_concurrency, "--target-concurrency", low=1, high=MAX_TOKENS)


def _check_out(out_dir: str, force: bool) -> None:
    """Check ``--out`` before planning: writable, and not an earlier run unless ``--force``.

    With ``--force`` the earlier run is only removed when the new one is written, so a plan
    that fails leaves it in place.
    """
    from kvscope.validate import fresh_run_dir, writable_dir

    if force:
        writable_dir(out_dir, "run directory")
    else:
        fresh_run_dir(out_dir, force=False)


def _kv_transfer(text: str | None) -> Any:
    """``--kv-transfer-config`` parsed, with LMCache's ``LMCACHE_*`` variables (it reads them)."""
    if text is None:
        return None
    import os

    from kvscope.plan.kv_connector import parse_kv_transfer

    return parse_kv_transfer(text, os.environ)
