"""``kvscope demo``: the main job on built-in defaults (no GPU, no network)."""

from __future__ import annotations

from pathlib import Path

import typer

from kvscope.cli.output import print_json, stderr, stdout


def demo(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Folder for runs and the report."),
    seed: int = typer.Option(7, "--seed", help="Workload seed."),
    json_out: bool = typer.Option(False, "--json", help="Print the headline figures as JSON."),
    force: bool = typer.Option(
        False, "--force", help="Replace --out even when it holds something other than a demo."
    ),
) -> None:
    """Plan DeepSeek-V4-Flash on 8xH200, simulate conversation traffic under three
    configurations, and write a self-contained HTML report."""
    from rich.table import Table

    from kvscope.demo import run_demo

    res = run_demo(
        out, seed, progress=lambda m: stderr.print(f"[dim]kvscope demo:[/] {m}"), force=force
    )
    if json_out:
        print_json(
            {"report": str(res.report), "plan": res.plan, "runs": res.runs, "wall_s": res.wall_s}
        )
        return
    p = res.plan
    stdout.print(
        f"[bold]Plan[/]: {p['weights_gib']:.1f} GiB weights and {p['kv_cache_gib']:.1f}"
        f" GiB KV cache per GPU -> {p['kv_tokens']:,} tokens of KV cache, "
        f"{p['max_concurrency']:.1f} requests at {p['max_model_len']:,} tokens"
    )
    from rich import box

    t = Table(
        title="Conversation traffic, 20 conversations/s (simulated)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        padding=(0, 1),
    )
    t.add_column("configuration", no_wrap=True, min_width=26)
    for c in ("TTFT99 s", "TPOT ms", "tok/s", "KV peak", "hits", "preempt"):
        t.add_column(c, justify="right", no_wrap=True, min_width=len(c))
    for name, r in res.runs.items():
        t.add_row(
            res.labels[name],
            f"{r['ttft_p99_s']:.2f}",
            f"{r['tpot_p50_s'] * 1e3:.1f}",
            f"{r['output_token_throughput_per_s']:,.0f}",
            f"{r['kv_usage_peak_frac'] * 100:.1f}%",
            f"{r['prefix_hit_rate'] * 100:.0f}%",
            f"{r['preemptions']:,}",
        )
    stdout.print(t)
    stdout.print(
        f"report: [bold]{res.report}[/] (open it in a browser; works offline) - {res.wall_s:.1f} s"
    )
