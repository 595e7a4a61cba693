"""What ``kvscope tune`` prints: the ranked table, the gain over vLLM's defaults, the winner's
command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Rows of the ranked table printed (ranked.json and the report have every point).
SHOWN = 15


def _s(v: Any) -> str:
    if not isinstance(v, int | float):
        return "-"
    return f"{v * 1e3:,.0f} ms" if v < 10 else f"{v:,.1f} s"


def _pct(v: Any) -> str:
    return f"{v:+.1%}" if isinstance(v, int | float) else "-"


def print_tune(summary: dict[str, Any], out: Path, console: Any) -> None:
    from rich.table import Table

    objective = summary["objective"]
    ranked = summary["ranked"]
    rate_col = "max rate" if objective == "max-rate" else "goodput"
    table = Table(
        title=f"kvscope tune ({objective}): best {min(SHOWN, len(ranked))} of {len(ranked)} points",
        title_justify="left",
    )
    for col in (
        "#",
        "configuration",
        "GPUs",
        "$/h",
        f"{rate_col} req/s",
        "TTFT P99",
        "TPOT P99",
        "SLO",
        "requests",
        "pareto",
    ):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for r in ranked[:SHOWN]:
        rate = r.get("max_rate_per_s") if objective == "max-rate" else r.get("goodput_per_s")
        if r.get("status") != "ok":
            table.add_row(
                str(r["rank"]), r["label"], str(r["num_gpus"]), "", "", "", "", "failed", "", ""
            )
            continue
        table.add_row(
            str(r["rank"]),
            r["label"],
            str(r["num_gpus"]),
            f"{r['usd_per_hour']:.2f}",
            f"{rate:,.2f}" if isinstance(rate, int | float) else "-",
            _s(r.get("ttft_p99_s")),
            _s(r.get("tpot_p99_s")),
            "met" if r.get("slo_met") else f"x{r.get('slo_excess') or 0:.2f}",
            f"{r.get('requests_simulated', 0):,}",
            "*" if r.get("pareto") else "",
        )
    console.print(table)
    console.print(
        f"{summary['space_points']:,} points in the space, {summary['pruned_points']:,} pruned "
        f"by the planner in {summary['prune_seconds'] * 1e3:.0f} ms, "
        f"{summary['simulated_points']:,} simulated ({summary['backend']})"
        + (", resumed" if summary.get("resumed") else "")
    )
    winner, gain = summary.get("winner"), summary.get("gain_vs_defaults")
    if winner and gain:
        console.print(
            f"winner {winner['label']}: goodput {_pct(gain.get('goodput'))}, goodput per "
            f"dollar {_pct(gain.get('goodput_per_dollar'))}"
            + (f", max rate {_pct(gain['max_rate'])}" if "max_rate" in gain else "")
            + (
                " vs SGLang's defaults"
                if summary.get("engine") == "sglang"
                else " vs vLLM's defaults"
            )
            + ("" if gain.get("defaults_met_slo") else " (which miss the SLO)")
        )
    if winner:
        console.print(winner["command"], soft_wrap=True, markup=False, highlight=False)
    if summary.get("confirm"):
        c = summary["confirm"]
        console.print(
            f"confirmed live: TTFT P99 {_s(c['measured'].get('ttft_p99_s'))} (simulated "
            f"{_s(c['simulated'].get('ttft_p99_s'))}), TPOT P99 "
            f"{_s(c['measured'].get('tpot_p99_s'))} (simulated "
            f"{_s(c['simulated'].get('tpot_p99_s'))}) in {c['run_dir']}"
        )
    console.print(f"every point, ranked.json and report.html are in {out}")
