"""``kvscope bench``: measure a live OpenAI-compatible server (``kvscope mock-server`` is a
scripted one to try it on: :mod:`kvscope.cli.mock_server`).

Thin: flags are parsed here and handed to :mod:`kvscope.bench`; the workload flags are the
shared ones of :mod:`kvscope.cli.workload`, so ``generate``, ``simulate`` and ``bench`` spell
them the same way. Exit codes: 0 ok, 1 when the error rate passed ``--max-error-rate`` (or
no probed rate met the SLOs), 2 bad input or an unusable server, 130 interrupted (after the
summary is written).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from kvscope.cli.workload import (
    ArrivalOpt,
    FormatOpt,
    JsonOpt,
    MaxModelLenOpt,
    NumRequestsOpt,
    OutputLenOpt,
    PromptLenOpt,
    SeedOpt,
    SkipBadOpt,
    SpeedupOpt,
    WorkloadOpt,
)


def bench(
    url: Annotated[str, typer.Option("--url", help="Server base URL, e.g. http://127.0.0.1:8000.")],
    model: Annotated[str, typer.Option("--model", help="Model name to put in each request.")],
    out: Annotated[Path, typer.Option("--out", help="Run directory to write.")],
    endpoint: Annotated[
        str, typer.Option("--endpoint", help="completions (/v1/completions) or chat.")
    ] = "completions",
    workload: WorkloadOpt = None,
    arrival: ArrivalOpt = None,
    prompt_len: PromptLenOpt = None,
    output_len: OutputLenOpt = None,
    duration: Annotated[
        float | None,
        typer.Option(
            "--duration",
            help="Seconds of arrivals to generate (or of a trace to replay); a closed loop "
            "(concurrency:n=N) stops issuing new requests after it.",
        ),
    ] = None,
    num_requests: NumRequestsOpt = None,
    speedup: SpeedupOpt = None,
    seed: SeedOpt = None,
    max_model_len: MaxModelLenOpt = None,
    fmt: FormatOpt = None,
    skip_bad: SkipBadOpt = False,
    max_concurrency: Annotated[
        int | None,
        typer.Option(
            "--max-concurrency",
            help="Cap on requests in flight over an open-loop rate (the schedule slides, "
            "never bursts).",
            show_default=False,
        ),
    ] = None,
    warmup: Annotated[
        float, typer.Option("--warmup", help="Seconds at the start left out of statistics.")
    ] = 0.0,
    cooldown: Annotated[
        float, typer.Option("--cooldown", help="Seconds at the end left out of statistics.")
    ] = 0.0,
    slo: Annotated[
        str | None,
        typer.Option(
            "--slo",
            help="Latency SLOs, e.g. ttft_p99=0.5,tpot_p99=50ms (ttft, tpot, itl, e2e).",
            show_default=False,
        ),
    ] = None,
    max_error_rate: Annotated[
        float,
        typer.Option("--max-error-rate", help="Exit 1 when more than this share of requests fail."),
    ] = 0.05,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            help="Local tokenizer.json for prompts of exact length (else calibrated).",
            show_default=False,
        ),
    ] = None,
    request_timeout: Annotated[
        float, typer.Option("--request-timeout", help="Seconds before a request times out.")
    ] = 600.0,
    stream_timeout: Annotated[
        float,
        typer.Option(
            "--stream-timeout",
            help="Seconds the server may stay silent (no headers, no token) before a request "
            "is recorded as a timeout.",
        ),
    ] = 60.0,  # kvscope.bench.config.DEFAULT_STREAM_TIMEOUT_S (not imported: CLI start-up)
    api_key_env: Annotated[
        str, typer.Option("--api-key-env", help="Environment variable holding the API key.")
    ] = "OPENAI_API_KEY",
    scrape_interval: Annotated[
        float,
        typer.Option("--scrape-interval", help="Seconds between /metrics scrapes (0: off)."),
    ] = 0.25,
    ignore_eos: Annotated[
        bool,
        typer.Option(
            "--ignore-eos/--no-ignore-eos", help="Ask the server to generate all max_tokens."
        ),
    ] = True,
    find_max_rate: Annotated[
        bool,
        typer.Option(
            "--find-max-rate", help="Search the highest Poisson rate meeting --slo (probe runs)."
        ),
    ] = False,
    max_rate: Annotated[
        float, typer.Option("--max-rate", help="Upper bound of the --find-max-rate search (req/s).")
    ] = 1000.0,
    start_rate: Annotated[
        float, typer.Option("--start-rate", help="First rate --find-max-rate probes (req/s).")
    ] = 1.0,
    force: Annotated[
        bool, typer.Option("--force", help="Replace --out when it already holds a run.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Measure a live OpenAI-compatible server under a workload; write a run directory."""
    from kvscope.bench import (
        BenchOptions,
        ClientConfig,
        Endpoint,
        load_for,
        normalize_base_url,
        parse_slo,
        run_bench,
    )
    from kvscope.bench.run import check_out
    from kvscope.cli.output import print_json, stderr
    from kvscope.errors import KvscopeError

    try:
        ep = Endpoint(endpoint)
    except ValueError:
        raise KvscopeError(f"--endpoint must be completions or chat, not '{endpoint}'.") from None
    for name, value in (("--warmup", warmup), ("--cooldown", cooldown)):
        if value < 0:
            raise KvscopeError(f"{name} must be >= 0 s.")
    if max_concurrency is not None and max_concurrency < 1:
        raise KvscopeError("--max-concurrency must be >= 1.")
    if scrape_interval and not 0.05 <= scrape_interval <= 60:
        raise KvscopeError("--scrape-interval must be 0 (off) or within 0.05-60 s.")
    client = ClientConfig(
        base_url=normalize_base_url(url),
        model=model,
        endpoint=ep,
        api_key_env=api_key_env,
        request_timeout_s=request_timeout,
        ignore_eos=ignore_eos,
        stream_timeout_s=stream_timeout,
    )
    client.headers()  # the API key is read (and registered for redaction) before anything
    slos = parse_slo(slo)
    options = BenchOptions(
        slo=slos,
        max_error_rate=max_error_rate,
        tokenizer=tokenizer,
        seed=seed or 0,
        preflight_timeout_s=min(30.0, request_timeout),
    )
    load_kw: dict[str, Any] = {
        "warmup_s": warmup,
        "cooldown_s": cooldown,
        "scrape_interval_s": scrape_interval or None,
        "drain_timeout_s": request_timeout,
    }
    from kvscope.bench.run import closed_loop_requests

    # A closed loop with --duration stops issuing when it is over (kvscope.bench.runner).
    num_requests = closed_loop_requests(arrival, num_requests, duration)
    build_args = (workload, arrival, prompt_len, output_len, duration, num_requests, speedup, seed)
    if find_max_rate:
        from kvscope.bench.search import find_max_rate as search

        if not slos:
            raise KvscopeError("--find-max-rate needs --slo (what the rate must meet).")
        check_out(out, force)
        result = search(
            client,
            options,
            build_args,
            out,
            max_rate=max_rate,
            start_rate=start_rate,
            max_concurrency=max_concurrency,
            load_kw=load_kw,
            max_model_len=max_model_len,
            fmt=fmt,
            skip_bad=skip_bad,
            log=lambda m: stderr.print(m, soft_wrap=True, markup=False, highlight=False),
            force=force,
        )
        if json_out:
            print_json(result)
        else:
            _print_search(result)
        if result.get("max_rate_per_s") is None:
            raise typer.Exit(1)
        return

    from kvscope.cli.workload import build_from_flags

    check_out(out, force)  # before the workload is built and long before any request
    w = build_from_flags(*build_args, max_model_len, fmt, skip_bad)
    load = load_for(w, max_concurrency, **load_kw)
    with _progress(len(w)) as progress:
        summary = run_bench(client, load, w, out, options, progress=progress, force=force)
    for warning in summary.get("warnings", []):
        stderr.print(f"[yellow]warning:[/] {warning}", soft_wrap=True)
    if json_out:
        print_json(summary)
    else:
        print_summary(summary, out)
    if summary.get("interrupted"):
        stderr.print("interrupted: everything measured so far is in " + str(out))
        raise typer.Exit(130)
    if summary.get("error_rate_exceeded"):
        stderr.print(
            f"error rate {summary['error_rate']:.1%} is above --max-error-rate "
            f"{summary['max_error_rate']:.1%}"
        )
        raise typer.Exit(1)


class _progress:
    """A rich progress bar on stderr when it is a terminal; a no-op callback otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Any:
        from kvscope.cli.output import stderr

        if not stderr.is_terminal:
            return None
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(
            TextColumn("bench"),
            BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} done {task.fields[info]}"),
            TimeElapsedColumn(),
            console=stderr,
            transient=True,
            refresh_per_second=2,
        )
        self._bar.start()
        self._task = self._bar.add_task("bench", total=self.total, info="")

        def update(c: Mapping[str, float]) -> None:
            self._bar.update(
                self._task,
                completed=c["done"],
                info=f"in flight {c['in_flight']:,.0f}, errors {c['errors']:,.0f}",
            )

        return update

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v * 1e3:,.1f}"


def slo_text(slo: Any) -> str:
    """``{"ttft_p99_s": 0.5, "tpot_s": 0.05}`` as people write it: ``TTFT p99 <= 500 ms,
    TPOT <= 50 ms`` (never a Python dict)."""
    if not isinstance(slo, Mapping) or not slo:
        return "no SLO"
    parts = []
    for key, limit in slo.items():
        metric, _, rest = str(key).removesuffix("_s").partition("_")
        name = metric.upper() + (f" {rest}" if rest else "")
        if isinstance(limit, int | float):
            value = f"{limit * 1e3:g} ms" if limit < 1 else f"{limit:g} s"
        else:
            value = str(limit)
        parts.append(f"{name} <= {value}")
    return ", ".join(parts)


def _finite(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and v == v and abs(v) != float("inf") else None


def rate_line(s: Mapping[str, Any]) -> str:
    """Requested (as asked), scheduled (the drawn arrival times) and achieved request rates.

    A Poisson schedule at 20/s of a few dozen requests spans a rate of its own (18.5/s, say):
    that is shown apart, so the rate asked for is never printed as something else.
    """
    req = _finite(s.get("requested_request_rate_per_s"))
    sched = _finite(s.get("scheduled_request_rate_per_s"))
    ach = _finite(s.get("achieved_request_rate_per_s")) or 0.0
    parts = []
    if req is not None:
        parts.append(f"requested {req:,.2f}/s")
        if sched is not None and abs(sched - req) > 0.005 * req:
            parts.append(f"scheduled {sched:,.2f}/s (the drawn arrival times)")
    parts.append(f"achieved {ach:,.2f}/s")
    return ", ".join(parts)


def print_summary(s: Mapping[str, Any], out: Path) -> None:
    """Human summary of one bench run (rich tables on stdout)."""
    from rich.table import Table

    from kvscope.cli.output import stdout

    head = Table(title=f"bench {s['config']['server']['url']} -> {out}", show_header=False)
    head.add_row(
        "requests",
        f"{s['requests_total']:,} ({s['completed']:,} ok in the measured window, "
        f"{s['errors']:,} errors, {s['incomplete']:,} incomplete)",
    )
    if s.get("errors_by_kind"):
        head.add_row(
            "errors by kind", ", ".join(f"{k} {v}" for k, v in s["errors_by_kind"].items())
        )
    head.add_row("request rate", rate_line(s))
    head.add_row(
        "dispatch lag",
        f"P50 {_ms(s.get('dispatch_lag_p50_s'))} ms, P99 {_ms(s.get('dispatch_lag_p99_s'))} ms, "
        f"max {_ms(s.get('dispatch_lag_max_s'))} ms",
    )
    if s.get("request_throughput_per_s") is not None:
        head.add_row(
            "throughput",
            f"{s['request_throughput_per_s']:,.2f} req/s, "
            f"{s['output_token_throughput_per_s']:,.0f} output tok/s, "
            f"{s['total_token_throughput_per_s']:,.0f} total tok/s",
        )
    if "goodput_per_s" in s:
        head.add_row("goodput", f"{s['goodput_per_s']:,.2f} req/s meeting {slo_text(s['slo'])}")
    pe = s.get("prompt_tokens_error", {})
    if pe.get("requests_with_usage"):
        head.add_row(
            "prompt length vs server",
            f"exact {pe['exact_share']:.0%}, mean |error| {pe['mean_abs_tokens']:.1f} tokens",
        )
    srv = s.get("server_metrics") or {}
    if srv:
        peak = srv.get("kv_cache_usage_frac_peak")
        head.add_row(
            "server /metrics",
            f"{srv['samples']} scrapes ({srv['failed_scrapes']} failed)"
            + (f", KV usage peak {peak:.1%}" if peak is not None else ""),
        )
    stdout.print(head)
    t = Table(title="latency (ms)")
    for c in ("", "p50", "p90", "p95", "p99", "p99.9", "mean"):
        t.add_column(c, justify="right")
    for m in ("ttft", "tpot", "itl", "e2e"):
        keys = ("p50", "p90", "p95", "p99", "p999", "mean")
        t.add_row(m.upper(), *(_ms(s.get(f"{m}_{k}_s")) for k in keys))
    stdout.print(t)


def _print_search(r: Mapping[str, Any]) -> None:
    from rich.table import Table

    from kvscope.cli.output import stdout

    best = r.get("max_rate_per_s")
    found = f"{best:,.2f}/s" if isinstance(best, int | float) else "none found"
    t = Table(title=f"max rate meeting {slo_text(r['slo'])}: {found}")
    for c in ("rate /s", "achieved /s", "TTFT p99 ms", "TPOT p99 ms", "errors", "verdict"):
        t.add_column(c, justify="right")
    for p in r["probes"]:
        t.add_row(
            f"{p['rate_per_s']:,.2f}",
            f"{p['achieved_request_rate_per_s'] or 0:,.2f}",
            _ms(p.get("ttft_p99_s")),
            _ms(p.get("tpot_p99_s")),
            f"{p['error_rate']:.1%}",
            p["verdict"],
        )
    stdout.print(t)
