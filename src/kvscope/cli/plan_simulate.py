"""``plan --search --simulate-top K``: the K cheapest candidates simulated under a workload.

The planner ranks by $/M tokens at a steady decode of ``--target-concurrency`` requests; the
simulator then replays the workload (the shared workload flags) through each of the K
cheapest, with ``--max-model-len`` at the target context and the candidate's layout and KV
dtype, and reports what a queue does to them: goodput under ``--slo``, TTFT and TPOT P99,
throughput. The points run through :mod:`kvscope.executor` (``--workers``, ``--ray``) in a
temporary folder; nothing is written (``--search`` writes no run directory).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from kvscope.errors import KvscopeError

#: Figures each simulated candidate gets in the table and the JSON.
FIGURES = (
    "goodput_per_s",
    "request_throughput_per_s",
    "ttft_p99_s",
    "tpot_p99_s",
    "preemptions",
    "rejected",
    "slo_met",
)


def simulate_top(
    res: Any,
    k: int,
    model: str,
    engine: Any,
    w: Any,
    slo: dict[str, float],
    backend: Any,
    cost_model: str = "roofline",
) -> list[dict[str, Any]]:
    """Figures of the ``k`` cheapest candidates of ``res`` (one dict each, in rank order),
    their steps priced by ``cost_model`` (``plan --cost-model``)."""
    from kvscope.executor import PointStore, PointTask, run_points
    from kvscope.sim import SimConfig
    from kvscope.tune.point import PointJob, simulate_point

    if k < 1:
        raise KvscopeError("--simulate-top must be at least 1.")
    tasks = []
    for i, c in enumerate(res.candidates[:k]):
        cfg = SimConfig(
            engine=engine.engine,
            model=model,
            gpu=c.gpu,
            tp=c.tp,
            pp=c.pp,
            dp=c.dp,
            enable_expert_parallel=c.ep,
            engine_version=engine.engine_version,
            disable_custom_all_reduce=engine.disable_custom_all_reduce,
            moe_runner_backend=engine.moe_runner_backend,
            attention_backend=engine.attention_backend,
            shared_expert_tp1=engine.shared_expert_tp1,
            kv_cache_dtype=c.kv_dtype,
            max_model_len=res.target_context,
            slo_ttft_s=next((v for s, v in slo.items() if s.startswith("ttft_")), None),
            slo_tpot_s=next((v for s, v in slo.items() if s.startswith("tpot_")), None),
            cost_model=cost_model,
        )
        tasks.append(PointTask(f"c{i:03d}", PointJob(cfg, len(w), 1.0, tuple(slo.items()))))
    with tempfile.TemporaryDirectory(prefix="kvscope-plan-") as tmp:
        done = run_points(simulate_point, tasks, w, PointStore(Path(tmp)), backend)
    return [
        {f: done[t.key].get(f) for f in FIGURES}
        | {"status": done[t.key].get("status"), "error": done[t.key].get("error")}
        for t in tasks
    ]


def simulated_table(res: Any, sims: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    tab = Table(
        title=f"the {len(sims)} cheapest, simulated under the workload", title_justify="left"
    )
    for col in (
        "#",
        "deployment",
        "goodput req/s",
        "req/s",
        "TTFT P99",
        "TPOT P99",
        "preempted",
        "SLO",
    ):
        tab.add_column(col, justify="left" if col == "deployment" else "right")
    for i, (c, s) in enumerate(zip(res.candidates, sims, strict=False), 1):
        name = f"{c.num_gpus}x {c.gpu} TP{c.tp} PP{c.pp} DP{c.dp}" + (" EP" if c.ep else "")
        name += f" kv {c.kv_dtype}"
        if s.get("status") != "ok":
            tab.add_row(str(i), name, "", "", "", "", "", str(s.get("error") or "failed"))
            continue

        def ms(v: Any) -> str:
            return f"{v * 1e3:,.0f} ms" if isinstance(v, int | float) else "-"

        tab.add_row(
            str(i),
            name,
            f"{s['goodput_per_s']:.2f}",
            f"{s['request_throughput_per_s']:.2f}",
            ms(s["ttft_p99_s"]),
            ms(s["tpot_p99_s"]),
            str(s["preemptions"]),
            "-" if s.get("slo_met") is None else ("met" if s["slo_met"] else "missed"),
        )
    return tab


def from_flags(res: Any, eng: Any, sim: dict[str, Any]) -> list[dict[str, Any]]:
    """``plan --simulate-top``: the cheapest candidates of ``res`` under the workload flags
    ``plan`` collected in ``sim`` (model, K, SLO, workload, executor, cost model)."""
    from kvscope.bench.metrics import parse_slo
    from kvscope.cli.workload import build_from_flags
    from kvscope.executor import parse_backend

    backend = parse_backend(sim["ray"], sim["workers"])
    w = build_from_flags(*sim["wl"])
    slo = parse_slo(sim["slo"])
    return simulate_top(res, sim["k"], sim["model"], eng, w, slo, backend, sim["cost_model"])
