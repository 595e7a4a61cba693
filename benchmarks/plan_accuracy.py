"""Planner accuracy on real engine start-up logs: per-case table plus median / P90 errors.

Run: PYTHONPATH=src python benchmarks/plan_accuracy.py
Rows come from tests/plan/data/engine_logs*.csv (each with its public source). After the
per-row table: the errors per family, engine, release group, GPU type and with / without
speculative decoding (scored rows), and the
counts issue 17 asks for (rows, DeepSeek V3+ rows, speculative-decoding rows, families, GPUs).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "plan"))

from log_cases import Result, evaluate, load_cases, percentile, tags
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
        "KV GiB err",
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
            _pct(r.kv_gib_err),
            _pct(r.weights_err),
            c.row["score"],
        )
    console = Console(width=170)
    console.print(table)
    main_rows = [r for r in results if r.case.row["score"] == "main"]
    sets = {
        "main (scored)": main_rows,
        "main, llm-d source only": [r for r in main_rows if "llm-d" in r.case.row["source"]],
        "main, other sources": [r for r in main_rows if "llm-d" not in r.case.row["source"]],
        "inferred inputs": [r for r in results if r.case.row["score"] == "inferred"],
        "engine refused to start": [r for r in results if r.case.row["score"] == "refused"],
        "all rows": results,
    }
    for label, subset in sets.items():
        tok = [r.tokens_err for r in subset if r.tokens_err is not None]
        wts = [r.weights_err for r in subset if r.weights_err is not None]
        avail = [
            r.tokens_from_available_err for r in subset if r.tokens_from_available_err is not None
        ]
        line = f"[bold]{label}[/] ({len(subset)} rows)"
        if tok:
            line += f": kv_tokens median {_pct(statistics.median(tok))}, P90 "
            within = sum(e <= 0.05 for e in tok)
            line += f"{_pct(percentile(tok, 90))}, within 5 %: {within}/{len(tok)}"
        if wts:
            line += f"; weights median {_pct(statistics.median(wts))}, P90 "
            line += f"{_pct(percentile(wts, 90))}, max {_pct(max(wts))} ({len(wts)} rows)"
        if avail:
            line += f"; KV-from-available median {_pct(statistics.median(avail))}"
        console.print(line)
    breakdown(console, results)


def _summary(rows: list[Result]) -> tuple[str, str, str, str]:
    tok = [r.tokens_err for r in rows if r.tokens_err is not None]
    wts = [r.weights_err for r in rows if r.weights_err is not None]
    return (
        _pct(statistics.median(tok)) if tok else "-",
        f"{sum(e <= 0.05 for e in tok)}/{len(tok)}" if tok else "-",
        _pct(statistics.median(wts)) if wts else "-",
        f"{sum(e <= 0.02 for e in wts)}/{len(wts)}" if wts else "-",
    )


def breakdown(console: Console, results: list[Result]) -> None:
    """Errors grouped by family, engine, release group, GPU and speculative decoding, then the
    acceptance counts."""
    tagged = [(r, tags(r.case)) for r in results]
    scored = [(r, t) for r, t in tagged if r.case.row["score"] == "main"]
    groupings = {
        "family": lambda t: t.family + (" + vision" if t.vision else ""),
        "engine": lambda t: t.release_group.split()[0],
        "release group": lambda t: t.release_group,
        "GPU": lambda t: t.gpu,
        "speculative decoding": lambda t: "with" if t.speculative else "without",
    }
    for title, key in groupings.items():
        table = Table(title=f"scored rows by {title}")
        cols = (title, "rows", "kv_tokens median", "within 5 %", "weights median", "within 2 %")
        for col in cols:
            table.add_column(col, justify="left" if col == title else "right")
        groups: dict[str, list[Result]] = {}
        for r, t in scored:
            groups.setdefault(key(t), []).append(r)
        for name in sorted(groups):
            table.add_row(name, str(len(groups[name])), *_summary(groups[name]))
        console.print(table)
    item2 = {t.family for _, t in tagged if not t.family.startswith("other")}
    if any(t.vision for _, t in tagged):
        item2.add("vision-language wrappers")
    gpus = sorted({t.gpu for _, t in tagged})
    console.print(
        f"[bold]acceptance counts[/]: {len(tagged)} rows; "
        f"{sum(t.deepseek_v3_plus for _, t in tagged)} DeepSeek V3/V3.2/V4 (incl. Kimi K2); "
        f"{sum(t.speculative for _, t in tagged)} with speculative decoding; "
        f"{len(item2)} item-2 families ({', '.join(sorted(item2))}); "
        f"{len(gpus)} GPU types ({', '.join(gpus)})"
    )


if __name__ == "__main__":
    main()
