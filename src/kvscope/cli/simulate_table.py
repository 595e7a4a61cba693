"""The human tables of ``kvscope simulate``: one run's headline figures, or a sweep's rows.

Units are those of the run's ``summary.json`` (seconds, fractions, tokens); the formats here
only choose how many digits a person sees.
"""

from __future__ import annotations

from typing import Any

#: Figures shown in the human table and the sweep comparison.
HEADLINE = (
    ("completed", "done", "{:,}"),
    ("rejected", "rejected", "{:,}"),
    ("ttft_p50_s", "TTFT p50 s", "{:.3f}"),
    ("ttft_p99_s", "TTFT p99 s", "{:.3f}"),
    ("tpot_p50_s", "TPOT p50 s", "{:.4f}"),
    ("tpot_p99_s", "TPOT p99 s", "{:.4f}"),
    ("output_token_throughput_per_s", "out tok/s", "{:,.0f}"),
    ("kv_usage_peak_frac", "KV peak", "{:.1%}"),
    ("kv_usage_mean_frac", "KV mean", "{:.1%}"),
    ("preemptions", "preempt", "{:,}"),
    ("prefix_hit_rate", "prefix hit", "{:.1%}"),
    ("internal_waste_tokens_mean", "waste tok", "{:,.0f}"),
    ("wall_s", "wall s", "{:.2f}"),
)
#: The narrower set a sweep table shows (one row per point): key, short title, format.
SWEEP_COLUMNS = (
    ("ttft_p99_s", "TTFT99 s", "{:.3g}"),
    ("tpot_p50_s", "TPOT50 s", "{:.3g}"),
    ("output_token_throughput_per_s", "tok/s", "{:,.0f}"),
    ("kv_usage_peak_frac", "KV peak", "{:.1%}"),
    ("preemptions", "preempt", "{:,}"),
    ("prefix_hit_rate", "hit", "{:.0%}"),
    ("internal_waste_tokens_mean", "waste", "{:,.0f}"),
)


#: The disaggregated TTFT breakdown, in order (prefill, link wait, transfer, decode first step).
_PARTS = ("prefill", "transfer_wait", "transfer", "decode_first_token")


def _fmt(fmt: str, v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


def print_table(results: list[dict[str, Any]], sweep: bool, console: Any) -> None:
    """The headline figures of one run, or one row per point of a sweep (rich table)."""
    from rich.table import Table

    if sweep:
        cols = SWEEP_COLUMNS
        table = Table(title="kvscope simulate: sweep")
        table.add_column("point", no_wrap=True)
        for _key, title, _f in cols:
            table.add_column(title, justify="right", no_wrap=True)
        for r in results:
            table.add_row(r["point"], *[_fmt(f, r.get(k)) for k, _t, f in cols])
    else:
        r = results[0]
        table = Table(title="kvscope simulate", show_header=False)
        table.add_column("figure")
        table.add_column("value", justify="right")
        for key, title, f in HEADLINE:
            table.add_row(title, _fmt(f, r.get(key)))
        table.add_row("requests", _fmt("{:,}", r.get("requests")))
        table.add_row("simulated s", _fmt("{:,.1f}", r.get("sim_end_s")))
        reps = r.get("replicas")
        if isinstance(reps, list):  # a fleet: replicas behind a router, requests per replica
            table.add_row("replicas", f"{len(reps)} ({r.get('router')})")
            table.add_row("req/replica", " ".join(f"{x['requests']:,}" for x in reps[:16]))
        pd = r.get("disagg")
        if isinstance(pd, dict):  # prefill/decode pools: the link and where TTFT went
            link = pd["link"]
            table.add_row("KV link", f"{link['kind']} {link['bandwidth'] / 1e9:,.0f} GB/s")
            table.add_row(
                "KV MB/request (all ranks)",
                _fmt("{:,.1f}", r["transfer_bytes_per_request_mean"] / 1e6),
            )
            parts = r.get("ttft_parts_s", {})
            p50 = [parts.get(k, {}).get("p50") for k in _PARTS]
            ms = " / ".join(_fmt("{:.2f}", None if v is None else v * 1e3) for v in p50)
            table.add_row("TTFT p50 parts ms", ms)
        if r.get("run_dir"):
            table.add_row("run dir", r["run_dir"])
    console.print(table)
    footers = {cost_footer(r.get("cost_model")): r.get("point") for r in results}
    for footer, point in footers.items():
        if footer:
            label = f"{point}: " if point and len(footers) > 1 else ""
            console.print(f"[dim]{label}{footer}[/dim]")


def cost_footer(cost: dict[str, Any] | None) -> str:
    """One line naming the step-time model and, where measured, its expected error."""
    if not cost:
        return ""
    line = f"step times: {cost.get('name')} ({cost.get('source')})"
    err = cost.get("expected_error")
    if err:
        line += (
            f"; expected error vs AIConfigurator on held-out {err['family']} points: median "
            f"{err['median_abs_err']:.0%}, P90 {err['p90_abs_err']:.0%}"
        )
    missed = cost.get("shapes_on_roofline")
    if missed:
        line += f"; {missed:,} step shapes AIC could not price used the fitted roofline"
    return line
