"""Planner accuracy on real engine start-up logs: per-case table plus median / P90 errors.

Run: PYTHONPATH=src python benchmarks/plan_accuracy.py
Rows come from tests/plan/data/engine_logs.csv (each with its public source).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "plan"))

from log_cases import evaluate, load_cases, percentile
from rich.console import Console
from rich.table import Table


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f} %"


def main() -> None:
    results = [evaluate(c) for c in load_cases()]
    table = Table(title="kvscope plan vs engine start-up logs")
    for col in (
        "case",
        "engine",
        "logged tokens",
        "predicted",
        "tokens err",
        "from-available err",
        "weights err",
        "set",
    ):
        table.add_column(col, justify="left" if col in ("case", "engine", "set") else "right")
    for r in results:
        c = r.case
        table.add_row(
            c.id,
            f"{c.row['engine']} {c.row['version']}",
            c.row["kv_tokens"],
            f"{r.predicted_tokens:,}",
            _pct(r.tokens_err),
            _pct(r.tokens_from_available_err),
            _pct(r.weights_err),
            c.row["score"],
        )
    console = Console()
    console.print(table)
    for label, subset in (
        ("main", [r for r in results if r.case.row["score"] == "main"]),
        ("all", results),
    ):
        tok = [r.tokens_err for r in subset if r.tokens_err is not None]
        wts = [r.weights_err for r in subset if r.weights_err is not None]
        avail = [
            r.tokens_from_available_err for r in subset if r.tokens_from_available_err is not None
        ]
        console.print(
            f"[bold]{label}[/] ({len(subset)} cases): kv_tokens median {_pct(statistics.median(tok))}"
            f", P90 {_pct(percentile(tok, 90))}, within 5 %: "
            f"{sum(e <= 0.05 for e in tok)}/{len(tok)}; weights median "
            f"{_pct(statistics.median(wts))}, P90 {_pct(percentile(wts, 90))}, max "
            f"{_pct(max(wts))} ({len(wts)}); KV-from-available median "
            f"{_pct(statistics.median(avail))}, max {_pct(max(avail))} ({len(avail)})"
        )


if __name__ == "__main__":
    main()
