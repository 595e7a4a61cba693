"""Speed, communication and cost parts of ``kvscope plan``, and ``kvscope plan --search``.

Thin helpers the ``plan`` command calls: they pick the serving batch from the memory plan,
call :func:`kvscope.plan.performance.performance` / :func:`kvscope.plan.search.search`, and
render rich tables. Heavy imports stay inside the functions (``kvscope plan`` start-up).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

    from kvscope.plan.config import EngineConfig, Parallelism
    from kvscope.plan.memory import MemoryPlan
    from kvscope.plan.performance import Performance
    from kvscope.plan.prices import Prices
    from kvscope.plan.roofline import Efficiency
    from kvscope.plan.search import SearchResult
    from kvscope.specs.hardware import GPUSpec
    from kvscope.specs.model import ModelSpec


def serving_batch(mem: MemoryPlan, context: int, target_concurrency: int | None, dp: int) -> int:
    """Requests per replica the throughput figures assume.

    ``--target-concurrency`` (split over DP replicas) if given; otherwise as many requests
    of ``context`` tokens as the engine's KV capacity holds, capped by ``--max-num-seqs``.
    """
    if target_concurrency is not None:
        return max(1, math.ceil(target_concurrency / dp))
    by_kv = mem.kv_tokens // max(context, 1)
    return max(1, min(mem.max_num_seqs, by_kv))


def plan_performance(
    model: ModelSpec,
    gpu: GPUSpec,
    par: Parallelism,
    mem: MemoryPlan,
    target_context: int | None = None,
    target_concurrency: int | None = None,
    gpu_hour_price: float | Prices | None = None,
    eff: Efficiency | None = None,
    comm_run: str | None = None,
    context: int | None = None,
) -> Performance:
    """Roofline, communication and cost for a planned deployment.

    ``comm_run``: a ``kvscope comm bench`` run directory whose fitted alpha-beta link
    replaces the catalogue's tensor-parallel link (with a warning in the result when it is
    not the planned GPU's interconnect).

    The context per request is ``--target-context``, else ``--context``, else
    ``--max-model-len`` capped at a typical 8,192 tokens
    (:func:`kvscope.plan.performance.figure_context`); the prefill chunk is
    ``--max-num-batched-tokens`` (the engine's chunked-prefill size).
    """
    import dataclasses

    from kvscope.plan.performance import figure_context, performance

    ctx, ctx_source = figure_context(target_context, context, mem.max_model_len)
    batch = serving_batch(mem, ctx, target_concurrency, par.dp)
    chunk = max(1, min(mem.max_num_batched_tokens, ctx))
    link, warning = measured_link(comm_run, par.tp, gpu) if comm_run else (None, None)
    perf = performance(
        model,
        gpu,
        par,
        batch,
        ctx,
        kv_dtype=mem.kv_cache_dtype,
        prefill_chunk=chunk,
        gpu_hour_price=gpu_hour_price,
        eff=eff,
        link=link,
        context_source=ctx_source,
    )
    return dataclasses.replace(perf, warnings=(warning,)) if warning else perf


def performance_json(perf: Performance) -> dict[str, Any]:
    """``roofline``, ``comm`` and ``cost`` objects for ``kvscope plan --json``."""
    from kvscope.plan.performance import sections

    return dict(sections(perf))


def _ms(s: float) -> str:
    return f"{s * 1e3:,.2f} ms"


def _gb(b: float) -> str:
    return f"{b / 1e9:,.2f} GB"


def performance_table(perf: Performance) -> Table:
    """Human table: decode/prefill bounds, turning points, communication, cost."""
    r, t, c = perf.roofline, perf.throughput, perf.cost
    from rich.table import Table

    tab = Table(title="Speed, communication and cost (roofline bounds)", title_justify="left")
    tab.add_column("figure")
    tab.add_column("value", justify="right")
    tab.add_column("note")
    lat = perf.latency
    tab.add_row(
        "decode step, batch 1",
        _ms(lat.step_s),
        f"{lat.limit}-bound; reads {_gb(lat.weight_bytes)} weights + {_gb(lat.kv_bytes)} KV"
        " per GPU",
    )
    d = r.decode
    tab.add_row(
        f"decode step, batch {d.batch}",
        _ms(d.step_s),
        f"{d.limit}-bound at {d.context:,} tokens of context",
    )
    tab.add_row(
        "time per output token",
        _ms(t.tpot_s),
        f"communication {t.comm_share:.0%} of it (not overlapped)",
    )
    tab.add_row(
        "output tokens/s", f"{t.tokens_per_s:,.0f}", f"{t.tokens_per_s_per_gpu:,.0f} per GPU"
    )
    p = r.prefill
    tab.add_row(
        f"prefill chunk of {p.tokens:,}",
        _ms(p.step_s),
        f"{p.limit}-bound; {p.tokens_per_s_per_replica:,.0f} prompt tokens/s per replica",
    )
    cross = r.kv_crossover_context
    tab.add_row(
        "KV reads overtake weights at",
        f"{cross:,} tokens" if cross else "never",
        f"context per sequence at batch {d.batch}",
    )
    cb = r.compute_bound_batch
    tab.add_row(
        "decode turns compute-bound at",
        f"batch {cb:,}" if cb else "never",
        f"at {d.context:,} tokens of context",
    )
    cd = perf.comm_decode
    tab.add_row(
        "communication per decode step",
        f"{cd.total_bytes / 1e6:,.2f} MB",
        f"{cd.tp_allreduce_count} all-reduces, {cd.ep_alltoall_count} all-to-alls; "
        f"{_ms(cd.total_s)} over {perf.link.name or 'no link'}",
    )
    usd = c.usd_per_million_tokens
    at = f"at {c.context_tokens:,} tokens/request" if c.context_tokens else ""
    tab.add_row(
        "cost",
        f"${usd:,.3f} / M tokens" if usd is not None else "n/a",
        f"{at} ({c.context_source}); {c.num_gpus} x ${c.gpu_hour_usd:.2f}/h = "
        f"${c.usd_per_hour:,.2f}/h",
    )
    tab.add_row("price per GPU-hour", f"${c.gpu_hour_usd:.2f}", c.price_source)
    kwh = c.kwh_per_million_tokens
    tab.add_row(
        "energy",
        f"{kwh:,.3f} kWh / M tokens" if kwh is not None else "n/a",
        f"{at}; {c.power_w:,.0f} W at TDP, GPUs only",
    )
    eff = r.efficiency
    tab.caption = (
        f"Efficiency: {eff.hbm:.0%} of HBM bandwidth, {eff.flops:.0%} of peak FLOPS "
        "(--hbm-efficiency / --flops-efficiency; bounds at 100 % in --json)."
    )
    return tab


def run_search(
    model: ModelSpec,
    gpus: list[GPUSpec] | None,
    target_context: int,
    target_concurrency: int,
    gpu_hour_price: float | Prices | None,
    engine: EngineConfig,
    eff: Efficiency | None = None,
    counts: tuple[int, ...] = (1, 2, 4, 8, 16),
    top: int = 20,
    context_source: str = "--target-context",
) -> SearchResult:
    """``kvscope plan --search``: rank deployments by $/M output tokens at
    ``target_context`` tokens per request."""
    from kvscope.plan.search import search

    return search(
        model,
        target_context,
        target_concurrency,
        gpus=gpus,
        counts=counts,
        gpu_hour_price=gpu_hour_price,
        mem_utilization=engine.gpu_memory_utilization or 0.9,
        eff=eff,
        engine=engine,
        top=top,
        context_source=context_source,
    )


def search_table(res: SearchResult) -> Table:
    """Human table of ranked search candidates."""
    from rich.table import Table

    tab = Table(
        title=(
            f"{res.model}: {res.target_concurrency} requests x {res.target_context:,} tokens, "
            "cheapest first"
        ),
        title_justify="left",
    )
    tab.add_column("#", justify="right")
    tab.add_column("deployment")
    tab.add_column("KV")
    tab.add_column("GiB/GPU\nweights+KV", justify="right")
    tab.add_column("tok/s", justify="right")
    tab.add_column("TPOT\nms", justify="right")
    tab.add_column("comm", justify="right")
    tab.add_column("$/M tok", justify="right")
    for i, c in enumerate(res.candidates, 1):
        split = (
            f"tp{c.tp}" + (f" pp{c.pp}" if c.pp > 1 else "") + (f" dp{c.dp}" if c.dp > 1 else "")
        )
        tab.add_row(
            str(i),
            f"{c.num_gpus}x {c.gpu} {split}{' ep' if c.ep else ''}",
            c.kv_dtype.replace("bfloat16", "bf16"),
            f"{c.weights_gib:.0f}+{c.kv_cache_gib:.0f}",
            f"{c.tokens_per_s:,.0f}",
            f"{c.tpot_s * 1e3:.1f}",
            f"{c.comm_share:.0%}",
            f"{c.usd_per_million_tokens:.3f}",
        )
    used = {c.gpu: (c.gpu_hour_usd, c.price_source) for c in res.candidates}
    prices = "; ".join(f"{g} ${usd:.2f}/h ({src})" for g, (usd, src) in used.items())
    tab.caption = (
        f"{res.evaluated:,} configurations costed in {res.seconds * 1e3:.1f} ms; "
        f"{res.feasible:,} fit the quick memory check; {res.engine_checked} checked against "
        f"the engine budget ({res.engine_rejected} rejected). KV GiB is the engine's whole KV "
        f"budget. Ranked and costed at {res.target_context:,} tokens per request "
        f"({res.context_source or '--target-context'}). Prices per GPU-hour: {prices or 'none'}."
    )
    return tab


def search_json(res: SearchResult) -> dict[str, Any]:
    """``kvscope plan --search --json`` object."""
    from kvscope.cli.output import to_jsonable

    out: dict[str, Any] = to_jsonable(res)
    return out


def measured_link(run_dir: str, tp: int, gpu: GPUSpec | None = None) -> tuple[Any, str | None]:
    """The tensor-parallel all-reduce link fitted by a ``kvscope comm bench`` run, and a
    warning when it is not ``gpu``'s interconnect (:func:`kvscope.plan.comm.link_mismatch`).

    The run's ``summary.json`` is read as UTF-8 JSON and its fitted ``alpha_s`` and
    ``beta_s_per_byte`` must be finite and non-negative: anything else is one error line.
    The backend is the run's ``config.backend`` (else ``environment.backend``).
    """
    from kvscope.comm.model import read_run_fit, to_link_model

    fit, summary = read_run_fit(run_dir)
    link = to_link_model(fit, "all_reduce", tp, f"measured ({run_dir})")
    if gpu is None:
        return link, None
    from kvscope.plan.comm import link_mismatch

    def section(key: str) -> dict[str, Any]:
        value = summary.get(key)
        return value if isinstance(value, dict) else {}

    env = section("environment")
    backend = section("config").get("backend") or env.get("backend") or "an unknown backend"
    cuda = env.get("cuda_available")
    return link, link_mismatch(
        gpu, tp, str(backend), cuda if isinstance(cuda, bool) else None, link.bandwidth
    )
