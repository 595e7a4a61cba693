"""``kvscope plan``: per-GPU memory budget and KV capacity as the engine will report them.

Thin layer: parses the engines' own flags, calls :func:`kvscope.plan.memory.plan_memory`
and :func:`kvscope.plan.advice.advise`, prints a table or one JSON object. Library imports
sit inside the command so ``kvscope plan --json`` starts fast.
"""

from __future__ import annotations

from typing import Any

import typer

from kvscope.errors import KvscopeError


def plan(
    model: str = typer.Option(..., "--model", help="Preset id/alias, config.json or folder."),
    gpu: str | None = typer.Option(
        None, "--gpu", help="GPU name (see `kvscope gpus`); with --search, limits the search."
    ),
    num_gpus: int | None = typer.Option(None, "--num-gpus", help="GPUs in all."),
    tensor_parallel_size: int | None = typer.Option(None, "--tensor-parallel-size", "--tp"),
    pipeline_parallel_size: int = typer.Option(1, "--pipeline-parallel-size", "--pp"),
    data_parallel_size: int = typer.Option(1, "--data-parallel-size", "--dp"),
    enable_expert_parallel: bool = typer.Option(False, "--enable-expert-parallel"),
    enable_dp_attention: bool = typer.Option(
        False, "--enable-dp-attention", help="SGLang: attention data-parallel over --dp ranks."
    ),
    dtype: str | None = typer.Option(None, "--dtype", help="Model dtype (auto = config)."),
    quantization: str | None = typer.Option(None, "--quantization"),
    kv_cache_dtype: str | None = typer.Option(None, "--kv-cache-dtype"),
    gpu_memory_utilization: float | None = typer.Option(None, "--gpu-memory-utilization"),
    mem_fraction_static: float | None = typer.Option(None, "--mem-fraction-static"),
    max_model_len: int | None = typer.Option(None, "--max-model-len"),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs"),
    max_num_batched_tokens: int | None = typer.Option(None, "--max-num-batched-tokens"),
    block_size: int | None = typer.Option(None, "--block-size"),
    kv_cache_memory_bytes: int | None = typer.Option(
        None, "--kv-cache-memory-bytes", help="vLLM: KV budget in bytes (skips the profile)."
    ),
    engine: str = typer.Option("vllm", "--engine", help="vllm or sglang."),
    engine_version: str | None = typer.Option(None, "--engine-version"),
    enforce_eager: bool = typer.Option(False, "--enforce-eager", help="No CUDA graphs."),
    cudagraph_memory: bool | None = typer.Option(
        None,
        "--cudagraph-memory/--no-cudagraph-memory",
        help="Subtract vLLM's CUDA-graph estimate (default: by version, >= 0.20 does).",
    ),
    flashinfer_sampler: bool | None = typer.Option(
        None,
        "--flashinfer-sampler/--no-flashinfer-sampler",
        help="vLLM samples with FlashInfer (VLLM_USE_FLASHINFER_SAMPLER; default by release).",
    ),
    context: int | None = typer.Option(
        None, "--context", help="Context length for the max-num-seqs advice (kvscope option)."
    ),
    search: bool = typer.Option(
        False, "--search", help="Rank (GPU, count, TP/PP/DP/EP, KV dtype) by $/M output tokens."
    ),
    target_context: int | None = typer.Option(
        None, "--target-context", help="Tokens per request for --search and the throughput figures."
    ),
    target_concurrency: int | None = typer.Option(
        None, "--target-concurrency", help="Requests served at once (all replicas)."
    ),
    gpu_hour_price: float | None = typer.Option(
        None, "--gpu-hour-price", help="USD per GPU-hour (default: indicative list price)."
    ),
    hbm_efficiency: float = typer.Option(
        0.8, "--hbm-efficiency", help="Achievable fraction of HBM bandwidth (kvscope option)."
    ),
    flops_efficiency: float = typer.Option(
        0.45, "--flops-efficiency", help="Achievable fraction of peak FLOPS (kvscope option)."
    ),
    comm_run: str | None = typer.Option(
        None,
        "--comm-run",
        help="A `kvscope comm bench` run directory: use its fitted link for TP all-reduces.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    out: str | None = typer.Option(
        None, "--out", help="Also write a run directory (summary.json, kind plan)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace --out when it already holds a run."),
) -> None:
    """Predict the weights, KV cache and concurrency vLLM/SGLang will report, per GPU."""
    from kvscope.plan.advice import advise
    from kvscope.plan.config import EngineConfig, Parallelism, resolve_parallel
    from kvscope.plan.memory import plan_memory
    from kvscope.specs.hardware import get_gpu
    from kvscope.specs.registry import load_model

    _check_request_flags(context, target_context, target_concurrency)
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
    spec = load_model(model, dtype, quantization)
    eng = EngineConfig(
        engine=engine,
        engine_version=engine_version,
        gpu_memory_utilization=gpu_memory_utilization,
        mem_fraction_static=mem_fraction_static,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        block_size=block_size,
        kv_cache_dtype=kv_cache_dtype,
        enforce_eager=enforce_eager,
        cudagraph_memory=cudagraph_memory,
        flashinfer_sampler=flashinfer_sampler,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
    )
    from kvscope.plan.roofline import Efficiency

    eff = Efficiency(hbm=hbm_efficiency, flops=flops_efficiency)
    if search:
        _search(
            spec,
            gpu,
            num_gpus,
            eng,
            target_context,
            target_concurrency,
            gpu_hour_price,
            eff,
            as_json,
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
    if not memory.fits:
        hint = "Lower --max-model-len or raise the memory fraction."
        longest = advice.largest_max_model_len
        if (memory.problem or "").startswith("--kv-cache-memory-bytes"):
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
        target_context or context,
        target_concurrency,
        gpu_hour_price,
        eff,
        comm_run,
    )
    if as_json or out:
        from kvscope.cli.output import print_json, to_jsonable

        doc: dict[str, Any] = to_jsonable(memory)
        doc["advice"] = to_jsonable(advice)
        doc.update(plan_perf.performance_json(perf))
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
    _print_table(memory, advice)
    from kvscope.cli.output import stdout

    stdout.print(plan_perf.performance_table(perf))


def _check_request_flags(
    context: int | None, target_context: int | None, target_concurrency: int | None
) -> None:
    """Token and request counts typed by hand: at least 1 and within what an engine holds.

    A zero used to be read as "not given" and a negative count as one request.
    """
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


def _warn(warnings: tuple[str, ...]) -> None:
    """Caveats on stderr, one line each (stdout stays the table or the JSON object)."""
    import sys

    for w in warnings:
        sys.stderr.write(f"kvscope: warning: {w}\n")


def _search(
    spec: Any,
    gpu: str | None,
    num_gpus: int | None,
    eng: Any,
    target_context: int | None,
    target_concurrency: int | None,
    gpu_hour_price: float | None,
    eff: Any,
    as_json: bool,
) -> None:
    from kvscope.cli import plan_perf
    from kvscope.cli.output import print_json, stdout
    from kvscope.specs.hardware import get_gpu

    if target_context is None or target_concurrency is None:
        raise KvscopeError(
            "--search needs --target-context and --target-concurrency.",
            "For example: --search --target-context 8192 --target-concurrency 64.",
        )
    gpus = [get_gpu(gpu)] if gpu is not None else None
    counts = (num_gpus,) if num_gpus else (1, 2, 4, 8, 16)
    res = plan_perf.run_search(
        spec, gpus, target_context, target_concurrency, gpu_hour_price, eng, eff, counts=counts
    )
    warnings = eng.version_warnings()
    if as_json:
        _warn(warnings)
        print_json({**plan_perf.search_json(res), "warnings": list(warnings)})
        return
    if not res.candidates:
        raise KvscopeError(
            f"no configuration of {spec.name} serves {target_concurrency} requests of "
            f"{target_context} tokens within {max(counts)} GPUs.",
            "Lower --target-context or --target-concurrency, or try --kv-cache-dtype fp8.",
        )
    _warn(warnings)
    stdout.print(plan_perf.search_table(res))


def _print_table(memory: Any, advice: Any) -> None:
    from rich.table import Table

    from kvscope.cli.output import stdout

    title = (
        f"{memory.model} on {memory.gpu}, {memory.engine} {memory.engine_version}, "
        f"TP{memory.tp} PP{memory.pp} DP{memory.dp}{' EP' if memory.ep else ''}"
    )
    t = Table(title=title, show_header=True)
    t.add_column("per GPU (rank 0)")
    t.add_column("value", justify="right")
    frac = "gpu_memory_utilization" if memory.engine == "vllm" else "mem_fraction_static"
    rows = [
        ("GPU memory (CUDA total)", f"{memory.gpu_memory_gib:.2f} GiB"),
        (
            f"budget ({frac} {memory.budget_fraction}; {memory.budget_source})",
            f"{memory.budget_gib:.2f} GiB",
        ),
        ("weights", f"{memory.weights_gib:.2f} GiB"),
        ("activation peak (profiling pass)", f"{memory.activation_peak_gib:.2f} GiB"),
        ("non-torch (CUDA context, NCCL)", f"{memory.non_torch_gib:.2f} GiB"),
        (
            "CUDA graphs"
            + (" (subtracted)" if memory.cudagraph_subtracted else " (not subtracted)"),
            f"{memory.cudagraph_gib:.2f} GiB",
        ),
        ("KV cache", f"{memory.kv_cache_gib:.2f} GiB"),
        ("KV bytes per token", f"{memory.kv_bytes_per_token:,.0f} B"),
        ("block size / KV groups", f"{memory.block_size} tokens / {memory.num_kv_groups}"),
        ("GPU blocks (min over ranks)", f"{memory.num_gpu_blocks:,}"),
        ("KV cache size (as logged)", f"{memory.kv_tokens:,} tokens"),
        (f"max concurrency at {memory.max_model_len:,} tokens", f"{memory.max_concurrency:.2f}x"),
        ("largest --max-model-len that fits", f"{advice.largest_max_model_len:,} tokens"),
        (
            f"--max-num-seqs sustained at {advice.context_tokens:,} tokens",
            f"{advice.max_num_seqs_at_context:,}",
        ),
    ]
    if advice.fp8_kv_gain:
        rows.append(
            (
                "with --kv-cache-dtype fp8",
                f"{advice.fp8_kv_tokens:,} tokens ({advice.fp8_kv_gain:.2f}x)",
            )
        )
    if advice.dp_attention_gain:
        rows.append(
            (
                "with data-parallel attention (per replica)",
                f"{advice.dp_attention_tokens_per_replica:,} tokens "
                f"({advice.dp_attention_gain:.2f}x)",
            )
        )
    for name, value in rows:
        t.add_row(name, value)
    stdout.print(t)
    for w in advice.warnings:
        stdout.print(f"[yellow]warning:[/] {w}")
    stdout.print(f"command: {advice.command}")
