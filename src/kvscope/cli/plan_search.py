"""``kvscope plan --search``: the cheapest GPU count and type that serve a target load, printed
as a table or one JSON object (the search itself is :func:`kvscope.cli.plan_perf.run_search`)."""

from __future__ import annotations

from typing import Any

from kvscope.errors import KvscopeError


def warn(warnings: tuple[str, ...]) -> None:
    """Caveats on stderr, one line each (stdout stays the table or the JSON object)."""
    import sys

    for w in warnings:
        sys.stderr.write(f"kvscope: warning: {w}\n")


def search(
    spec: Any,
    gpu: str | None,
    num_gpus: int | None,
    eng: Any,
    target_context: int | None,
    target_concurrency: int | None,
    prices: Any,
    eff: Any,
    as_json: bool,
    sim: dict[str, Any] | None = None,
) -> None:
    from kvscope.cli import plan_perf
    from kvscope.cli.output import print_json, stdout
    from kvscope.plan.performance import TYPICAL_CONTEXT_TOKENS
    from kvscope.specs.hardware import get_gpu

    if target_concurrency is None:
        raise KvscopeError(
            "--search needs --target-concurrency.",
            "For example: --search --target-context 8192 --target-concurrency 64.",
        )
    source = "--target-context"
    if target_context is None:
        target_context = TYPICAL_CONTEXT_TOKENS
        source = f"default: typical context {TYPICAL_CONTEXT_TOKENS:,}"
    gpus = [get_gpu(gpu)] if gpu is not None else None
    counts = (num_gpus,) if num_gpus else (1, 2, 4, 8, 16)
    res = plan_perf.run_search(
        spec,
        gpus,
        target_context,
        target_concurrency,
        prices,
        eng,
        eff,
        counts=counts,
        context_source=source,
    )
    warnings = eng.version_warnings()
    from kvscope.cli.plan_simulate import from_flags

    sims = from_flags(res, eng, sim) if sim is not None and res.candidates else None
    if as_json:
        warn(warnings)
        doc = {**plan_perf.search_json(res), "warnings": list(warnings)}
        print_json(doc if sims is None else {**doc, "simulated": sims})
        return
    if not res.candidates:
        hint = "Lower --target-context or --target-concurrency, or try --kv-cache-dtype fp8."
        if eng.gpu_memory_in_use_gib:
            # vLLM >= 0.9.1 refuses any start whose free memory is below its fraction
            hint += " Beside --gpu-memory-in-use, also lower --gpu-memory-utilization."
        raise KvscopeError(
            f"no configuration of {spec.name} serves {target_concurrency} requests of "
            f"{target_context} tokens within {max(counts)} GPUs.",
            hint,
        )
    warn(warnings)
    stdout.print(plan_perf.search_table(res))
    if sims is not None:
        from kvscope.cli.plan_simulate import simulated_table

        stdout.print(simulated_table(res, sims))
