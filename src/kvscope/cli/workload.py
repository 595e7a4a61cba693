"""``kvscope workload``: statistics of a trace or spec, generate a stream, convert formats.

The ``*Opt`` annotated types below are the one definition of the shared workload flags
(``--workload --arrival --prompt-len --output-len --duration --num-requests --speedup
--seed``); ``kvscope simulate`` and ``kvscope bench`` import them so the names never drift,
and pass the values to :func:`kvscope.workload.spec.build_workload`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(
    help="Workloads: trace statistics, synthetic generation, format conversion.",
    no_args_is_help=True,
)

WorkloadOpt = Annotated[
    str | None,
    typer.Option(
        "--workload",
        help="A trace (Azure, BurstGPT, Mooncake, WEKA, ShareGPT, kvscope JSONL/Parquet) "
        "or a YAML workload spec.",
        show_default=False,
    ),
]
ArrivalOpt = Annotated[
    str | None,
    typer.Option(
        "--arrival",
        help="KIND:params, e.g. poisson:rate=10, gamma:rate=10,cv=2, "
        "spike:base=5,peak=50,start=60,length=10, ramp:from=1,to=50,duration=300, "
        "steps:min=1,max=20,interval=30, diurnal:mean=10,amplitude=0.5, "
        "onoff:rate=20,on=10,off=20, "
        "concurrency:n=16; join with + to sum.",
        show_default=False,
    ),
]
PromptLenOpt = Annotated[
    str | None,
    typer.Option(
        "--prompt-len",
        help="Prompt tokens: N, uniform:min=,max=, normal:mean=,std=, "
        "lognormal:median=,sigma=, mix:0.95@128,0.05@4096, empirical:FILE. Default 1024.",
        show_default=False,
    ),
]
OutputLenOpt = Annotated[
    str | None,
    typer.Option(
        "--output-len",
        help="Output tokens (same forms as --prompt-len). Default 128.",
        show_default=False,
    ),
]
DurationOpt = Annotated[
    float | None,
    typer.Option(
        "--duration",
        help="Seconds of arrivals to generate (or of a trace to replay).",
        show_default=False,
    ),
]
NumRequestsOpt = Annotated[
    int | None,
    typer.Option(
        "--num-requests", help="Number of requests (first N of a trace).", show_default=False
    ),
]
SpeedupOpt = Annotated[
    float | None,
    typer.Option(
        "--speedup", help="Compress time by this factor (2 = twice the rate).", show_default=False
    ),
]
SeedOpt = Annotated[
    int | None,
    typer.Option("--seed", help="Random seed (default 0, or the spec file's).", show_default=False),
]
MaxModelLenOpt = Annotated[
    int | None,
    typer.Option(
        "--max-model-len", help="Clamp prompt+output to this many tokens.", show_default=False
    ),
]
FormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="Trace format if detection should be skipped: azure, burstgpt, mooncake, "
        "weka, sharegpt, kvscope.",
        show_default=False,
    ),
]
SkipBadOpt = Annotated[
    bool,
    typer.Option(
        "--skip-bad", help="Skip malformed rows (counted and reported) instead of failing."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable result on stdout.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace --out when it already exists.")]
#: Suffixes ``Workload.save`` writes (Parquet, or JSONL under either name).
OUTPUT_SUFFIXES = (".parquet", ".jsonl", ".json")


def output_file(out: Path, force: bool) -> Path:
    """Check ``--out`` before any work: a workload suffix, writable, and not an existing file
    unless ``--force`` (an earlier result is never silently replaced)."""
    from kvscope.errors import KvscopeError
    from kvscope.validate import fresh_file

    if out.suffix not in OUTPUT_SUFFIXES:
        raise KvscopeError(f"{out}: output must end in .parquet or .jsonl.")
    return fresh_file(out, force=force, what="workload file")


def build_from_flags(
    workload: str | None,
    arrival: str | None,
    prompt_len: str | None,
    output_len: str | None,
    duration: float | None,
    num_requests: int | None,
    speedup: float | None,
    seed: int | None,
    max_model_len: int | None,
    fmt: str | None,
    skip_bad: bool,
) -> Any:
    """The one place the shared workload flags become a ``Workload`` (generate, stats,
    simulate and bench all call it), with a spinner on stderr and skipped or failed rows
    reported there."""
    from kvscope.cli.output import stderr
    from kvscope.workload.spec import build_workload

    with stderr.status("building workload ...", spinner="dots"):
        w = build_workload(
            workload,
            arrival,
            prompt_len,
            output_len,
            duration,
            num_requests,
            speedup,
            seed,
            max_model_len,
            fmt=fmt,
            skip_bad=skip_bad,
        )
    report_skips(w.spec)
    return w


def report_skips(spec: Any) -> None:
    from kvscope.cli.output import stderr

    n = spec.get("skipped_bad_rows", 0) if hasattr(spec, "get") else 0
    if n:
        first = spec["skipped_examples"][0]
        stderr.print(f"[yellow]skipped {n} malformed row(s)[/]; first: {first}", soft_wrap=True)
    failed = spec.get("failed_requests", 0) if hasattr(spec, "get") else 0
    if failed:
        stderr.print(
            f"[yellow]{failed} failed request(s) (zero response tokens) kept apart[/]",
            soft_wrap=True,
        )


@app.command("stats")
def stats(
    source: Annotated[
        str | None,
        typer.Argument(
            help="Trace file/directory or YAML spec (omit to describe the flags' stream).",
            show_default=False,
        ),
    ] = None,
    arrival: ArrivalOpt = None,
    prompt_len: PromptLenOpt = None,
    output_len: OutputLenOpt = None,
    duration: DurationOpt = None,
    num_requests: NumRequestsOpt = None,
    speedup: SpeedupOpt = None,
    seed: SeedOpt = None,
    max_model_len: MaxModelLenOpt = None,
    block_size: Annotated[
        int | None,
        typer.Option(
            "--block-size",
            help="KV block size (tokens) for prefix-reuse figures; default: the "
            "trace's own hash block size.",
            show_default=False,
        ),
    ] = None,
    fmt: FormatOpt = None,
    skip_bad: SkipBadOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Count, rates, burstiness, length percentiles, prefix reuse and a --max-model-len hint."""
    from kvscope.cli.output import print_json
    from kvscope.validate import count
    from kvscope.workload.lengths import MAX_TOKENS
    from kvscope.workload.stats import workload_stats

    if block_size is not None:  # before the trace is read, which may take a while
        count(block_size, "--block-size", low=1, high=MAX_TOKENS)

    w = build_from_flags(
        source,
        arrival,
        prompt_len,
        output_len,
        duration,
        num_requests,
        speedup,
        seed,
        max_model_len,
        fmt,
        skip_bad,
    )
    result = workload_stats(w, block_size=block_size)
    if json_out:
        print_json(result)
    else:
        _print_stats(result)


def _f(v: Any, nd: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:,.{nd}f}"


def _print_stats(s: dict[str, Any]) -> None:
    from rich.table import Table

    from kvscope.cli.output import stdout

    src = s["source"]
    head = Table(title=f"workload {src.get('path') or src.get('source', '')}", show_header=False)
    head.add_row("requests", _f(s["requests"]))
    head.add_row("duration", f"{_f(s['duration_s'])} s")
    head.add_row(
        "mean rate", f"{_f(s['mean_rate_per_s'], 2)} /s  {_f(s['mean_rate_per_min'])} /min"
    )
    head.add_row("peak rate", f"{_f(s['peak_rate_per_s'])} /s  {_f(s['peak_rate_per_min'])} /min")
    head.add_row("inter-arrival CV", _f(s["interarrival_cv"], 2))
    if s["offered_tokens_per_s"]:
        o = s["offered_tokens_per_s"]
        head.add_row(
            "offered tokens/s",
            f"{_f(o['total'], 0)} (prompt {_f(o['prompt'], 0)}, output {_f(o['output'], 0)})",
        )
    if s.get("prefix"):
        p = s["prefix"]
        head.add_row(
            "prefix block reuse",
            f"{p['block_reuse_share']:.1%} of {p['block_refs']:,} "
            f"block refs ({p['hash_block_size']}-token blocks)",
        )
        if p.get("reusable_token_share") is not None:
            head.add_row(
                f"reusable prompt tokens @{p['block_size']}", f"{p['reusable_token_share']:.1%}"
            )
    if s.get("sizing"):
        z = s["sizing"]
        head.add_row(
            "suggested --max-model-len",
            f"{z['suggested_max_model_len']:,} (P95 context "
            f"{_f(z['p95_context_tokens'], 0)} + 15-20 %; {z['requests_over_suggested']:,} "
            "requests longer)",
        )
    if s.get("prompt_normalization"):
        n = s["prompt_normalization"]
        head.add_row(
            "prefix hit share raw / normalised",
            f"{n['prefix_hit_share_raw']:.1%} / "
            f"{n['prefix_hit_share_normalized']:.1%} (+{n['extra_hit_share']:.1%})",
        )
    stdout.print(head)
    t = Table(title="lengths (tokens)")
    for c in ("", "mean", "p50", "p90", "p95", "p99", "max"):
        t.add_column(c, justify="right")
    for k in ("prompt_tokens", "output_tokens", "total_tokens"):
        d = s[k]
        t.add_row(
            k.split("_")[0], *(_f(d[c], 0) for c in ("mean", "p50", "p90", "p95", "p99", "max"))
        )
    stdout.print(t)


@app.command("generate")
def generate(
    out: Annotated[Path, typer.Option("--out", help="Output file: .parquet or .jsonl.")],
    workload: WorkloadOpt = None,
    arrival: ArrivalOpt = None,
    prompt_len: PromptLenOpt = None,
    output_len: OutputLenOpt = None,
    duration: DurationOpt = None,
    num_requests: NumRequestsOpt = None,
    speedup: SpeedupOpt = None,
    seed: SeedOpt = None,
    max_model_len: MaxModelLenOpt = None,
    fmt: FormatOpt = None,
    skip_bad: SkipBadOpt = False,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Generate (or transform) a request stream and write it to --out."""
    from kvscope.cli.output import print_json, stdout

    output_file(out, force)
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
        skip_bad,
    )
    path = w.save(out)
    result = {"out": str(path), "requests": len(w), "duration_s": w.duration_s, "spec": w.spec}
    if json_out:
        print_json(result)
    else:
        stdout.print(f"wrote {len(w):,} requests over {w.duration_s:,.1f} s to {path}")


@app.command("convert")
def convert(
    source: Annotated[str, typer.Argument(help="Trace or workload file to read.")],
    out: Annotated[Path, typer.Option("--out", help="Output file: .parquet or .jsonl.")],
    fmt: FormatOpt = None,
    skip_bad: SkipBadOpt = False,
    force: ForceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Convert any supported trace to kvscope JSONL or Parquet (clock starts at 0)."""
    from kvscope.cli.output import print_json, stdout
    from kvscope.workload.stream import Workload

    output_file(out, force)

    w = Workload.from_file(source, fmt, skip_bad=skip_bad).shift_to_zero()
    report_skips(w.spec)
    path = w.save(out)
    result = {"out": str(path), "requests": len(w), "duration_s": w.duration_s, "spec": w.spec}
    if json_out:
        print_json(result)
    else:
        stdout.print(f"converted {len(w):,} requests ({w.spec.get('format')}) to {path}")


def _register_from_events() -> None:
    from kvscope.cli.workload_events import from_events

    app.command("from-events")(from_events)


_register_from_events()
