"""``tune --confirm URL``: measure the winner live and set it beside the simulated point.

The server at URL is expected to run the winner's command (``command.txt``). The workload
the winner was simulated on (the whole of it, at the rate it was simulated at; with
``max-rate`` at the rate found) is sent by ``kvscope bench`` (:func:`kvscope.bench.run_bench`)
into ``DIR/confirm/``, and the measured percentiles, goodput and SLO verdict are written
beside the simulated ones in ``summary.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvscope.validate import write_text_atomic
from kvscope.workload import Workload

#: Figures compared between the simulated and the measured run.
COMPARED = (
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p99_s",
    "goodput_per_s",
    "request_throughput_per_s",
)


def confirm_winner(
    url: str, summary: dict[str, Any], workload: Workload, out: Path, slo: Mapping[str, float]
) -> dict[str, Any]:
    """Bench the winner's workload against ``url``; returns (and saves) the comparison."""
    from kvscope.bench import BenchOptions, ClientConfig, load_for, run_bench

    winner = summary["winner"]
    w = workload
    factor = winner.get("max_rate_factor")
    if isinstance(factor, int | float) and factor > 0 and factor != 1:
        w = workload.speedup(float(factor))
    client = ClientConfig(base_url=url, model=summary["model"])
    options = BenchOptions(slo=dict(slo))
    run_dir = out / "confirm"
    measured = run_bench(client, load_for(w, None), w, run_dir, options, force=True)
    result = {
        "url": client.public_url,
        "run_dir": str(run_dir),
        "simulated": {k: winner.get(k) for k in COMPARED},
        "measured": {k: measured.get(k) for k in COMPARED},
        "measured_slo_met": measured.get("slo_all_met"),
    }
    path = out / "summary.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["confirm"] = result
    write_text_atomic(path, json.dumps(doc, indent=2, default=str) + "\n", "summary")
    return result
