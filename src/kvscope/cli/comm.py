"""``kvscope comm``: measure collectives (latency percentiles, bandwidth) and check the model."""

from __future__ import annotations

from typing import Any

import typer

from kvscope.cli.output import print_json, stderr, stdout

app = typer.Typer(
    help="Collective communication: latency tails, bandwidth, the alpha-beta model.",
    no_args_is_help=True,
)

_BACKEND = typer.Option(
    "gloo", "--backend", help="gloo (CPU, any host) or nccl (one GPU per rank)."
)
_WORLD = typer.Option(
    2, "--world-size", "-n", help="Ranks to launch on this host (under torchrun: its WORLD_SIZE)."
)
_ITERS = typer.Option(20, "--iters", help="Timed iterations per point.")
_WARMUP = typer.Option(5, "--warmup", help="Untimed iterations before them.")
_TIMEOUT = typer.Option(
    60.0, "--timeout", help="Seconds without progress from any rank before the run is stopped."
)
_JSON = typer.Option(False, "--json", help="Print summary.json's content on stdout.")
_OUT = typer.Option(None, "--out", help="Run directory to write (summary.json, comm.parquet).")
_FAULT = typer.Option(None, "--inject-fault", hidden=True, help="RANK:exit|hang[@STEP] (tests).")
_FORCE = typer.Option(False, "--force", help="Replace --out when it already holds a run.")


def _check_out(out: str | None, force: bool) -> None:
    """A bad --out is one line before any rank starts (the ranks may run for minutes).

    Under torchrun only rank 0 writes the run directory, so only it checks (another rank
    would see rank 0's first file, or remove it with --force).
    """
    from kvscope.comm.torchrun import torchrun_rank

    under = torchrun_rank()
    if out is not None and (under is None or under[0] == 0):
        from kvscope.validate import fresh_run_dir

        fresh_run_dir(out, force=force)


def _progress(total_label: str) -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    return Progress(
        TextColumn(total_label),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        console=stderr,
        transient=True,
    )


@app.command()
def bench(
    op: str = typer.Option(
        "all_reduce",
        "--op",
        help="all_reduce, all_gather, reduce_scatter, all_to_all, broadcast or send_recv.",
    ),
    sizes: str = typer.Option(
        "1K:1M:x4",
        "--sizes",
        help="FIRST:LAST:xFACTOR, FIRST:LAST:+STEP or A,B,C (bytes; K/M/G are binary).",
    ),
    backend: str = _BACKEND,
    world_size: int = _WORLD,
    iters: int = _ITERS,
    warmup: int = _WARMUP,
    dtype: str = typer.Option("float32", "--dtype", help="float32, float16 or bfloat16."),
    timeout: float = _TIMEOUT,
    json_out: bool = _JSON,
    out: str = _OUT,
    force: bool = _FORCE,
    inject_fault: str = _FAULT,
) -> None:
    """Latency P50/P95/P99/max, jitter, algbw/busbw and slowest rank per size; alpha-beta fit."""
    from kvscope.comm.bench import BenchConfig, run_bench
    from kvscope.comm.launch import Fault
    from kvscope.comm.rundir import summary_document
    from kvscope.comm.sizes import format_size, parse_sweep

    config = BenchConfig(
        op=op,
        sizes=tuple(parse_sweep(sizes)),
        backend=backend,
        world_size=world_size,
        iters=iters,
        warmup=warmup,
        dtype=dtype,
        timeout_s=timeout,
        fault=Fault.parse(inject_fault) if inject_fault else None,
    )
    _check_out(out, force)
    with _progress(f"{config.op} x{world_size} ({backend})") as bar:
        task = bar.add_task("", total=len(config.sizes))

        def tick(done: int, total: int, row: dict[str, Any]) -> None:
            bar.update(task, completed=done, description=format_size(row["size_bytes"]))

        result = run_bench(config, out, tick, force=force)
    if result.rank != 0:
        return  # under torchrun, rank 0 reports
    _warn_oversubscribed(result.environment)
    if json_out:
        print_json(summary_document(result.summary()))
        return
    _render_bench(result.rows, result.summary())


def _table_console() -> Any:
    """The terminal as is; when piped, a console wide enough not to squash the columns."""
    if stdout.is_terminal:
        return stdout
    from rich.console import Console

    return Console(width=150, highlight=False, soft_wrap=False)


def _warn_oversubscribed(env: dict[str, Any]) -> None:
    if env.get("cpu_oversubscribed"):
        stderr.print(
            f"note: {env['world_size']} gloo ranks on {env['cpu_count']} CPU cores; the "
            "latency tail includes the ranks waiting for a core."
        )


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.1f}"


def _bandwidth(gbps: float | None) -> str:
    return (
        "bandwidth: no size dependence measured" if gbps is None else f"bandwidth = {gbps:.3f} GB/s"
    )


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _render_bench(rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    from rich.table import Table

    from kvscope.comm.sizes import format_size

    cfg = summary["config"]
    t = Table(
        title=f"{cfg['op']} on {cfg['world_size']} ranks ({cfg['backend']}, {cfg['dtype']}, "
        f"{cfg['iters']} iterations; times in µs, bandwidths in GB/s as nccl-tests)"
    )
    cols = (
        "size",
        "p50",
        "p95",
        "p99",
        "max",
        "jitter",
        "algbw",
        "busbw",
        "slowest rank",
        "model",
        "p50/model",
        "p99/model",
    )
    for c in cols:
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(
            format_size(r["size_bytes"]),
            _us(r["lat_p50_s"]),
            _us(r["lat_p95_s"]),
            _us(r["lat_p99_s"]),
            _us(r["lat_max_s"]),
            _us(r["jitter_s"]),
            f"{r['algbw_gbps']:.3f}",
            f"{r['busbw_gbps']:.3f}",
            f"{r['slowest_rank']} (×{r['rank_spread']:.2f})",
            _us(r["predicted_s"]),
            _ratio(r["measured_over_predicted"]),
            _ratio(r["p99_over_predicted"]),
        )
    con = _table_console()
    con.print(t)
    fit = summary["fit"]
    if fit is None:
        con.print(f"link fit: not done ({summary['fit_note'].rstrip('.')})")
    else:
        con.print(
            f"link fit (alpha-beta, P50s): alpha = {fit['alpha_s'] * 1e6:,.1f} µs per step, "
            + _bandwidth(fit["bandwidth_gbps"])
            + f"; RMS error {fit['rms_rel_error'] * 100:.1f} %"
        )
    wrong = summary["headline"].get("wrong_results", 0)
    if wrong:
        con.print(f"[bold red]{wrong} rank-results were wrong[/] (see wrong_ranks)")
    env = summary["environment"]
    con.print(
        f"torch {env['torch_version']}, {env['backend']}, "
        f"{len(env['variables'])} NCCL/GLOO variables set; GPU topology: "
        + (env["gpu_topology"] if env["gpu_topology"].startswith("unavailable") else "recorded")
    )


@app.command()
def moe(
    skew: str = typer.Option(
        "0,1,2",
        "--skew",
        help="Zipf exponents of expert popularity, comma-separated (0 = uniform routing).",
    ),
    experts: int = typer.Option(8, "--experts", help="Routed experts E (Mixtral-8x7B: 8)."),
    top_k: int = typer.Option(2, "--top-k", help="Experts per token (Mixtral-8x7B: 2)."),
    tokens: int = typer.Option(128, "--tokens", help="Tokens each rank dispatches per step."),
    hidden: int = typer.Option(4096, "--hidden", help="Hidden size (elements per token)."),
    backend: str = _BACKEND,
    world_size: int = typer.Option(4, "--world-size", "-n", help="Ranks (expert-parallel size)."),
    iters: int = typer.Option(30, "--iters", help="Timed dispatches per skew."),
    warmup: int = _WARMUP,
    dtype: str = typer.Option("bfloat16", "--dtype", help="Activation dtype."),
    seed: int = typer.Option(0, "--seed", help="Routing seed."),
    timeout: float = _TIMEOUT,
    json_out: bool = _JSON,
    out: str = _OUT,
    force: bool = _FORCE,
    inject_fault: str = _FAULT,
) -> None:
    """MoE dispatch: all-to-all with uneven splits from top-k routing; how skew moves the tail."""
    from kvscope.comm.dispatch import MoeConfig, run_moe
    from kvscope.comm.launch import Fault
    from kvscope.comm.rundir import summary_document
    from kvscope.errors import KvscopeError
    from kvscope.validate import finite

    unreadable = KvscopeError(f"cannot read --skew '{skew}'.", "Use numbers: 0,1,1.5.")
    try:
        parts = [float(s) for s in skew.split(",") if s.strip()]
    except ValueError:
        raise unreadable from None
    if not parts:
        raise unreadable
    skews = tuple(finite(x, "--skew", low=0.0) for x in parts)
    config = MoeConfig(
        skews=skews,
        world_size=world_size,
        num_experts=experts,
        top_k=top_k,
        tokens_per_rank=tokens,
        hidden=hidden,
        backend=backend,
        iters=iters,
        warmup=warmup,
        dtype=dtype,
        seed=seed,
        timeout_s=timeout,
        fault=Fault.parse(inject_fault) if inject_fault else None,
    )
    _check_out(out, force)
    with _progress(f"MoE dispatch x{world_size} ({backend})") as bar:
        task = bar.add_task("", total=len(skews))

        def tick(done: int, total: int, row: dict[str, Any]) -> None:
            bar.update(task, completed=done, description=f"skew {row['skew']:g}")

        result = run_moe(config, out, tick, force=force)
    if result.rank != 0:
        return  # under torchrun, rank 0 reports
    _warn_oversubscribed(result.environment)
    if json_out:
        print_json(summary_document(result.summary()))
        return
    from rich.table import Table

    t = Table(
        title=f"MoE dispatch all-to-all: top-{top_k} of {experts} experts, {tokens} tokens x "
        f"{hidden} ({config.dtype}) per rank, {world_size} ranks; times in µs"
    )
    for c in (
        "skew",
        "MiB/rank",
        "imbalance",
        "bottleneck MiB p99",
        "p50",
        "p95",
        "p99",
        "max",
        "p99/least skew",
        "model p99",
        "p99/model",
        "corr(imb,lat)",
    ):
        t.add_column(c, justify="right")
    for r in result.rows:
        corr = r["corr_imbalance_latency"]
        t.add_row(
            f"{r['skew']:g}",
            f"{r['bytes_per_rank_mean'] / 2**20:.2f}",
            f"{r['imbalance_mean']:.2f}",
            f"{r['bottleneck_bytes_p99'] / 2**20:.2f}",
            _us(r["lat_p50_s"]),
            _us(r["lat_p95_s"]),
            _us(r["lat_p99_s"]),
            _us(r["lat_max_s"]),
            _ratio(r["p99_vs_least_skew"]),
            _us(r["predicted_p99_s"]),
            _ratio(r["p99_over_predicted"]),
            "-" if corr is None else f"{corr:+.2f}",
        )
    con = _table_console()
    con.print(t)
    fit = result.summary()["fit"]
    if fit is not None:
        bw = fit["bandwidth_gbps"]
        con.print(
            f"dispatch link fit: alpha = {fit['alpha_s'] * 1e6:,.1f} µs per step, "
            + _bandwidth(bw)
            + f"; RMS error {fit['rms_rel_error'] * 100:.1f} %. p99/model near 1: the tail is "
            "the busiest rank's traffic; well above 1: it comes from elsewhere."
        )
