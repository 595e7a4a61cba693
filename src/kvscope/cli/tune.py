"""``kvscope tune``: the best deployment for a workload and an SLO, searched by simulation.

A thin shell over :func:`kvscope.tune.run.tune`: the model, GPU and price flags of ``plan``
and ``simulate`` (``cli/cost_options.py``), the parallel-layout flags
(``cli/parallel_options.py``: given here, each pins its axis of the space, as
``--kv-cache-dtype`` pins ``kv_cache_dtype``), the engine flags of the fixed deployment every
point shares (``cli/engine_options.py``: DCP, the encoder's TP mode, custom all-reduce,
SGLang's MoE runner; passed to each point's ``SimConfig`` as ``simulate`` passes them), the
shared workload flags and the executor's (``cli/executor_options.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from kvscope.cli.cost_options import (
    CostModelOpt,
    GpuHourPrice,
    GpuSpecFile,
    PricesFile,
    Provider,
)
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
from kvscope.cli.output import print_json, stderr, stdout
from kvscope.cli.parallel_options import (
    AsyncScheduling,
    EnableDpAttention,
    EnableExpertParallel,
    EngineVersion,
    NumGpus,
    TensorParallelSize,
)
from kvscope.cli.spec_options import SpeculativeConfig
from kvscope.cli.workload import (
    ArrivalOpt,
    DurationOpt,
    FormatOpt,
    JsonOpt,
    MaxModelLenOpt,
    NumRequestsOpt,
    OutputLenOpt,
    PromptLenOpt,
    SeedOpt,
    SpeedupOpt,
    WorkloadOpt,
)
from kvscope.errors import KvscopeError


def tune(
    slo: Annotated[
        str,
        typer.Option(
            "--slo",
            help="Targets every point must meet, e.g. ttft_p99=0.5,tpot_p99=50ms (ttft, tpot, "
            "e2e at p50, p90, p95, p99, p99.9); the TTFT and TPOT values also define goodput.",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Tune folder: every point's run, ranked.json, summary.json, report.html; "
            "rerun with the same arguments to resume.",
        ),
    ],
    model: Annotated[str, typer.Option("--model", help="Preset id/alias or config.json.")] = (
        "meta-llama/Llama-3.1-8B"
    ),
    gpu: Annotated[
        str, typer.Option("--gpu", help="GPU types to try, comma-separated (`kvscope gpus`).")
    ] = "H100",
    max_gpus: Annotated[
        int, typer.Option("--max-gpus", help="Most GPUs one deployment may use.")
    ] = 8,
    engine: Annotated[str, typer.Option("--engine", help="vllm or sglang.")] = "vllm",
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
    objective: Annotated[
        str,
        typer.Option(
            "--objective",
            help="goodput-per-dollar (good requests per USD), max-rate (highest request rate "
            "meeting the SLO, by bisection) or min-gpus (fewest GPUs meeting it).",
        ),
    ] = "goodput-per-dollar",
    space: Annotated[
        Path | None,
        typer.Option(
            "--space",
            help="YAML space file: axis: [values] replacing a default axis (tp, dp, "
            "kv_cache_dtype, max_num_seqs, ...) [default: kvscope's space for the engine].",
        ),
    ] = None,
    max_configs: Annotated[
        int | None,
        typer.Option(
            "--max-configs",
            help="Simulate at most this many points after pruning (a seeded sample) "
            "[default: all].",
        ),
    ] = None,
    max_time: Annotated[
        float | None,
        typer.Option(
            "--max-time",
            help="Seconds after which no new point starts; the ranking uses those finished "
            "[default: no limit].",
        ),
    ] = None,
    eta: Annotated[
        int,
        typer.Option(
            "--eta", help="Successive halving: keep the best 1/ETA after each slice (1: off)."
        ),
    ] = 3,
    min_requests: Annotated[
        int, typer.Option("--min-requests", help="Requests in the shortest slice.")
    ] = 100,
    confirm: Annotated[
        str | None,
        typer.Option(
            "--confirm",
            help="URL of a server started with the winner's command: bench it with the "
            "workload and put the measured point beside the simulated one [default: off].",
        ),
    ] = None,
    tp: TensorParallelSize = None,
    pp: Annotated[
        int | None,
        typer.Option("--pipeline-parallel-size", "--pp", help="Pin the pipeline stages."),
    ] = None,
    dp: Annotated[
        int | None,
        typer.Option("--data-parallel-size", "--dp", help="Pin the data-parallel replicas."),
    ] = None,
    enable_expert_parallel: EnableExpertParallel = False,
    enable_dp_attention: EnableDpAttention = False,
    num_gpus: NumGpus = None,
    kv_cache_dtype: KvCacheDtype = None,
    max_model_len: MaxModelLenOpt = None,
    dtype: Annotated[
        str | None, typer.Option("--dtype", help="Model dtype.", show_default="the config's")
    ] = None,
    cost_model: CostModelOpt = "roofline",
    speculative_config: SpeculativeConfig = None,
    spec_acceptance: Annotated[
        str | None,
        typer.Option(
            "--spec-acceptance",
            help="Draft acceptance of the points with a speculative config (see `simulate`).",
        ),
    ] = None,
    gpu_hour_price: GpuHourPrice = None,
    prices_file: PricesFile = None,
    provider: Provider = None,
    gpu_spec_file: GpuSpecFile = None,
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
    force: Annotated[
        bool, typer.Option("--force", help="Replace --out when it holds another run.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Search deployments by simulation: the best flags for this traffic and SLO."""
    from kvscope.bench.metrics import parse_slo
    from kvscope.cli.workload import build_from_flags
    from kvscope.executor import parse_backend
    from kvscope.plan.prices import resolve_prices
    from kvscope.sim import SimConfig
    from kvscope.specs.user_gpus import use_gpu_file
    from kvscope.tune.run import TuneRequest
    from kvscope.validate import finite

    use_gpu_file(gpu_spec_file)
    targets = parse_slo(slo)
    if max_time is not None:
        finite(max_time, "--max-time", low=0, low_open=True)
    base = SimConfig(
        engine=engine,  # type: ignore[arg-type]
        model=model,
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
        max_model_len=max_model_len,
        cost_model=cost_model,
        speculative_config=speculative_config,
        spec_acceptance=spec_acceptance if speculative_config else None,
        spec_seed=seed or 0,
    )
    pins = _pins(
        tp, pp, dp, num_gpus, enable_expert_parallel, enable_dp_attention, speculative_config
    )
    if kv_cache_dtype is not None:
        pins += (("kv_cache_dtype", (kv_cache_dtype,)),)
    if no_hipblaslt:  # a point-by-point refusal would only read as "no point fits"
        from kvscope.plan.rocm_blas import check_hipblaslt
        from kvscope.specs.hardware import get_gpu

        for name in (g.strip() for g in gpu.split(",") if g.strip()):
            check_hipblaslt(get_gpu(name), False)
    req = TuneRequest(
        base=base,
        gpus=tuple(g.strip() for g in gpu.split(",") if g.strip()),
        max_gpus=max_gpus,
        slo=tuple(targets.items()),
        objective=objective,
        space_file=str(space) if space is not None else None,
        max_configs=max_configs,
        max_time_s=max_time,
        eta=eta,
        min_requests=min_requests,
        seed=seed or 0,
        pins=pins,
        spec_acceptance=spec_acceptance,
    )
    backend = parse_backend(ray, workers)
    prices = resolve_prices(gpu_hour_price, prices_file, provider)
    if backend.kind == "ray":
        from kvscope.executor.ray_backend import connect

        connect(backend.address or "auto")  # an address that does not answer: one line now
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
    summary = _search(req, w, out, backend, prices, force)
    if confirm is not None and summary.get("winner"):
        from kvscope.tune.confirm import confirm_winner

        summary["confirm"] = confirm_winner(confirm, summary, w, out, targets)
    _write_report(out)
    if json_out:
        print_json(_json_doc(summary))
    else:
        from kvscope.cli.tune_table import print_tune

        print_tune(summary, out, stdout)
    if not summary.get("slo_met_by_any"):
        closest = summary["ranked"][0] if summary.get("ranked") else None
        raise KvscopeError(
            "no configuration meets the SLO"
            + (f"; the closest is {closest['label']}" if closest else "")
            + f" (the ranked table of the closest points is in {out}/ranked.json)."
        )


def _pins(
    tp: int | None,
    pp: int | None,
    dp: int | None,
    num_gpus: int | None,
    ep: bool,
    dp_attention: bool,
    speculative_config: str | None,
) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    pins: dict[str, tuple[Any, ...]] = {}
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp), ("num_gpus", num_gpus)):
        if value is not None:
            if value < 1:
                raise KvscopeError(f"--{name.replace('_', '-')} must be at least 1.")
            pins[name] = (value,)
    if ep:
        pins["enable_expert_parallel"] = (True,)
    if dp_attention:
        pins["enable_dp_attention"] = (True,)
    if speculative_config:
        pins["speculative_config"] = (speculative_config,)
    return tuple(pins.items())


def _search(req: Any, w: Any, out: Path, backend: Any, prices: Any, force: bool) -> Any:
    """Run the search with a progress bar on stderr: points done, best so far, ETA."""
    from kvscope.executor.progress import JobProgress
    from kvscope.tune.run import tune as run_tune
    from kvscope.tune.search import best_text

    rows: list[dict[str, Any]] = []
    with JobProgress(stderr, 0, "tune") as bar:

        def stage(what: str, total: int) -> None:
            bar.stage(what, total)

        def point(row: dict[str, Any]) -> None:
            rows.append(row)
            bar.done(best=best_text(rows, req.objective))

        try:
            return run_tune(
                req, w, out, backend, prices, force=force, on_stage=stage, on_point=point
            )
        except KeyboardInterrupt:
            bar.stop()
            saved = sum(1 for d in (out / "points").glob("*") if not d.name.startswith("."))
            sys.stderr.write(
                f"kvscope: interrupted; {saved} points are saved in {out}/points; rerun the "
                "same command to resume\n"
            )
            raise typer.Exit(130) from None


def _write_report(out: Path) -> None:
    from kvscope.report.page import write_report

    try:
        write_report([out], out / "report.html", title=f"kvscope tune: {out.name}")
    except KvscopeError as err:
        stderr.print(f"[yellow]kvscope: warning: no report page ({err.one_line()})[/yellow]")


def _json_doc(summary: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "objective",
        "slo",
        "model",
        "engine",
        "backend",
        "resumed",
        "space_points",
        "pruned_points",
        "simulated_points",
        "points_finished",
        "gain_vs_defaults",
        "defaults",
        "pareto",
        "confirm",
    )
    return {
        "ranked": summary["ranked"],
        "winner": summary.get("winner"),
        **{k: summary.get(k) for k in keys},
    }
