"""The main job (``make run`` / ``kvscope demo``): plan, simulate, compare, report.

It needs no GPU and no network. It plans DeepSeek-V4-Flash on 8×H200 (what vLLM would report
at start-up), then replays one built-in conversation workload (``demo_workload.yaml``, shaped
like the public Azure LLM inference trace 2023; parameters and sources in that file) through
the simulated engine under three configurations — vLLM's defaults, ``--max-num-seqs 64`` and
``--no-enable-prefix-caching`` — and writes one self-contained HTML report comparing them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvscope.validate import fresh_run_dir

WORKLOAD = Path(__file__).with_name("demo_workload.yaml")
MODEL = "deepseek-ai/DeepSeek-V4-Flash"
GPU = "H200"
TP = 8

#: (run name, what changes against vLLM's defaults, SimConfig overrides)
CONFIGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("default", "vLLM defaults", {}),
    ("max-num-seqs-64", "--max-num-seqs 64", {"max_num_seqs": 64}),
    ("no-prefix-caching", "--no-enable-prefix-caching", {"enable_prefix_caching": False}),
)

HEADLINE = (
    "ttft_p99_s",
    "tpot_p50_s",
    "output_token_throughput_per_s",
    "kv_usage_peak_frac",
    "prefix_hit_rate",
    "preemptions",
)


@dataclass(frozen=True)
class DemoResult:
    report: Path
    plan: dict[str, Any]
    runs: dict[str, dict[str, Any]]
    labels: dict[str, str]
    wall_s: float


def _earlier_demo(out: Path) -> bool:
    """Whether ``out`` holds only what an earlier ``kvscope demo`` wrote there."""
    if not out.is_dir():
        return False
    mine = {"plan", "report.html", *(f"sim-{name}" for name, _label, _over in CONFIGS)}
    names = {p.name for p in out.iterdir()}
    return bool(names) and names <= mine and (out / "plan" / "summary.json").is_file()


def run_demo(
    out_dir: str | Path = "runs/demo",
    seed: int = 7,
    progress: Callable[[str], None] | None = None,
    force: bool = False,
) -> DemoResult:
    """Plan, simulate the three configurations, write ``out_dir/report.html``.

    ``out_dir`` may hold an earlier demo (it is replaced, so ``make run`` can run twice);
    any other non-empty folder is refused unless ``force``.
    """
    from kvscope.plan.config import EngineConfig, Parallelism
    from kvscope.plan.memory import plan_memory
    from kvscope.report import write_report
    from kvscope.results import RunDir
    from kvscope.sim.run import SimConfig, simulate
    from kvscope.specs.hardware import get_gpu
    from kvscope.specs.registry import load_model
    from kvscope.workload.spec import build_workload

    say = progress or (lambda _msg: None)
    start = time.perf_counter()
    out = fresh_run_dir(out_dir, force=force or _earlier_demo(Path(out_dir)), what="demo folder")
    say(f"planning {MODEL} on {TP}x{GPU}")
    model, gpu = load_model(MODEL), get_gpu(GPU)
    engine = EngineConfig(kv_cache_dtype="fp8", block_size=256)
    mem = plan_memory(model, gpu, Parallelism(tp=TP), engine)
    plan_fig = {
        k: getattr(mem, k)
        for k in (
            "gpu_memory_gib",
            "weights_gib",
            "activation_peak_gib",
            "non_torch_gib",
            "cudagraph_gib",
            "kv_cache_gib",
            "num_gpu_blocks",
            "kv_tokens",
            "max_concurrency",
            "max_model_len",
        )
    }
    RunDir(out / "plan", "plan").write_summary(
        {
            "model": MODEL,
            "gpu": gpu.name,
            "tensor_parallel_size": TP,
            "kv_cache_dtype": "fp8",
            "block_size": 256,
        },
        plan_fig,
    )
    say("building the conversation workload")
    workload = build_workload(str(WORKLOAD), None, None, None, None, None, None, seed, None)
    base = SimConfig(model=MODEL, gpu=GPU, tp=TP, kv_cache_dtype="fp8")
    runs: dict[str, dict[str, Any]] = {}
    dirs = [out / "plan"]
    for name, label, overrides in CONFIGS:
        say(f"simulating {len(workload):,} requests: {label}")
        result = simulate(workload, replace(base, **overrides))
        result.write(out / f"sim-{name}", dict(workload.spec))
        runs[name] = {k: result.figures.get(k) for k in HEADLINE}
        dirs.append(out / f"sim-{name}")
    say("writing the report")
    report = write_report(
        dirs,
        out / "report.html",
        title=f"kvscope demo: {MODEL} on {TP}x{GPU}, conversation traffic",
    )
    labels = {name: label for name, label, _ in CONFIGS}
    return DemoResult(report, plan_fig, runs, labels, time.perf_counter() - start)
