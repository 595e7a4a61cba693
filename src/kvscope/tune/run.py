"""``tune()``: the whole loop, and the tune folder it writes.

Folder layout (``--out DIR``): ``tune.json`` (the arguments: a rerun with the same ones
resumes, other ones are refused unless ``--force``), ``points/<key>/`` (one simulate run
directory per point and rung, written as each finishes), ``ranked.json`` (every point in
order with its flags and figures), ``summary.json`` (kind ``tune``: the winner, vLLM's
defaults and the gain over them, the Pareto front, the pruning counts), ``command.txt`` (the
winner's launch line) and ``report.html``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kvscope.errors import KvscopeError
from kvscope.executor import Backend, PointStore
from kvscope.plan.prices import Prices
from kvscope.sim.deployment import engine_config
from kvscope.sim.run import SimConfig
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model
from kvscope.tune.command import launch_command
from kvscope.tune.prune import prune
from kvscope.tune.rank import OBJECTIVES, pareto, rank, score
from kvscope.tune.search import Candidate, Settings, halving
from kvscope.tune.space import Point, default_axes, expand, load_space
from kvscope.validate import count, fresh_run_dir, writable_dir, write_text_atomic
from kvscope.workload import Workload

#: The file that records a tune folder's arguments.
MANIFEST = "tune.json"
#: SLO metrics tune can hold a simulated run to (the simulator's summary percentiles).
SLO_METRICS = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class TuneRequest:
    """What to tune: ``base`` holds the fixed flags (model, engine, --max-model-len, cost
    model, ...); ``slo`` maps summary keys (``ttft_p99_s``) to seconds."""

    base: SimConfig
    gpus: tuple[str, ...]
    max_gpus: int
    slo: tuple[tuple[str, float], ...]
    objective: str = "goodput-per-dollar"
    space_file: str | None = None
    max_configs: int | None = None
    max_time_s: float | None = None
    eta: int = 3
    min_requests: int = 100
    seed: int = 0
    #: ``--spec-acceptance`` for the points with a speculative config (the others have none)
    spec_acceptance: str | None = None
    #: axes fixed by command-line flags (``--tp 2`` pins ``tp`` to ``(2,)``), over the space
    pins: tuple[tuple[str, tuple[Any, ...]], ...] = ()

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise KvscopeError(f"--objective must be one of {', '.join(OBJECTIVES)}.")
        if not self.slo:
            raise KvscopeError("tune needs --slo, e.g. --slo ttft_p99=0.5,tpot_p99=50ms.")
        for key, _ in self.slo:
            if key.split("_")[0] not in SLO_METRICS:
                raise KvscopeError(
                    f"--slo {key.removesuffix('_s')}: a simulated run reports TTFT, TPOT and "
                    "E2E percentiles (ttft_pNN, tpot_pNN, e2e_pNN)."
                )
        if self.base.engine not in ("vllm", "sglang"):
            raise KvscopeError("tune searches --engine vllm or sglang.")
        # the fixed engine flags, refused as `simulate` refuses them (vLLM with
        # --moe-runner-backend, SGLang with --decode-context-parallel-size, ...)
        engine_config(self.base)
        count(self.max_gpus, "--max-gpus", low=1, high=4096)
        count(self.eta, "--eta", low=1, high=100)
        count(self.min_requests, "--min-requests", low=1)
        if self.max_configs is not None:
            count(self.max_configs, "--max-configs", low=1)
        if not self.gpus:
            raise KvscopeError("tune needs at least one --gpu.")


def _per_request_slo(slo: Mapping[str, float]) -> dict[str, float | None]:
    """The goodput targets: a request is good when its TTFT and TPOT meet the SLO values."""

    def first(metric: str) -> float | None:
        return next((v for k, v in slo.items() if k.startswith(metric + "_")), None)

    return {"slo_ttft_s": first("ttft"), "slo_tpot_s": first("tpot")}


def candidates(req: TuneRequest, prices: Prices) -> tuple[list[Candidate], dict[str, Any]]:
    """The points to simulate (pruned, budgeted) with vLLM's defaults among them."""
    targets = _per_request_slo(dict(req.slo))
    base = replace(req.base, slo_ttft_s=targets["slo_ttft_s"], slo_tpot_s=targets["slo_tpot_s"])
    model = load_model(base.model, dtype=base.dtype, revision=base.revision)
    for g in req.gpus:
        get_gpu(g)
    axes = load_space(
        req.space_file,
        default_axes(base.engine, req.gpus, req.max_gpus, model.is_moe, model.uses_mla),
    )
    axes.update(dict(req.pins))
    points = expand(axes, req.max_gpus)
    context = base.max_model_len or model.max_position_embeddings
    dcp = base.decode_context_parallel_size
    pruned = prune(points, model, base.engine, context, dcp)
    if not pruned.kept:
        reasons = sorted({why for _p, why in pruned.dropped})
        raise KvscopeError(
            f"the search space is empty after pruning: none of {len(points):,} points fits "
            f"({reasons[0] if reasons else 'no point'}).",
            "Allow more GPUs (--max-gpus), a larger GPU, or a shorter --max-model-len.",
        )
    kept = list(pruned.kept)
    if req.max_configs is not None and len(kept) > req.max_configs:
        rng = np.random.default_rng(req.seed)
        idx = sorted(rng.choice(len(kept), size=req.max_configs, replace=False).tolist())
        kept = [kept[i] for i in idx]

    def price(gpu: str) -> float:
        p = prices.price(get_gpu(gpu))
        if p is None:
            raise KvscopeError(f"no price for {gpu}; pass --gpu-hour-price {gpu}=USD.")
        return p.usd_per_gpu_hour

    default_pt = Point(gpu=req.gpus[0], tp=dcp)  # DCP needs TP of at least its size
    default_cfg = replace(base, **default_pt.sim_fields())
    spec = req.spec_acceptance
    out = [Candidate(default_pt, default_cfg, price(default_pt.gpu) * 1, True)]
    for p in kept:
        cfg = replace(
            base, **p.sim_fields(), spec_acceptance=spec if p.speculative_config else None
        )
        if cfg == default_cfg and p.replicas == 1:
            continue
        out.append(Candidate(p, cfg, price(p.gpu) * p.num_gpus))
    facts = {
        "space_points": len(points),
        "pruned_points": len(pruned.dropped),
        "prune_seconds": pruned.seconds,
        "simulated_points": len(out),
        "context_tokens": context,
        "pruned_reasons": _reason_counts(pruned.dropped),
    }
    return out, facts


def _reason_counts(dropped: tuple[tuple[Point, str], ...]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _p, why in dropped:
        counts[why] = counts.get(why, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _manifest(req: TuneRequest, workload: Workload) -> dict[str, Any]:
    doc = asdict(req)
    doc.pop("max_time_s")  # a longer budget resumes the same search
    return {"request": doc, "workload": dict(workload.spec), "requests": len(workload)}


def open_out(out: Path, manifest: Mapping[str, Any], force: bool) -> bool:
    """Prepare ``out``: True when it resumes an earlier run of the same arguments."""
    writable_dir(out, "tune folder")  # a name the OS cannot hold: one line, not a traceback
    path = out / MANIFEST
    same = False
    if path.is_file():
        try:
            same = json.loads(path.read_text(encoding="utf-8")) == json.loads(
                json.dumps(manifest, default=str)
            )
        except (OSError, ValueError):
            same = False
    if same and not force:
        return True
    if path.is_file() and not force:
        raise KvscopeError(
            f"{out}: holds a tune run with other arguments.",
            "Pass the same arguments to resume it, --force to replace it, or another --out.",
        )
    fresh_run_dir(out, force=force)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(manifest, indent=2, default=str) + "\n", "tune manifest")
    return False


def tune(
    req: TuneRequest,
    workload: Workload,
    out: Path,
    backend: Backend,
    prices: Prices | None = None,
    *,
    force: bool = False,
    on_stage: Callable[[str, int], None] | None = None,
    on_point: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Search, write the tune folder, return its summary (``ranked`` holds every point)."""
    if len(workload) == 0:
        raise KvscopeError("the workload has no requests.")
    cands, facts = candidates(req, prices or Prices())
    resumed = open_out(out, _manifest(req, workload), force)
    settings = Settings(req.objective, req.slo, req.eta, req.min_requests)
    deadline = None if req.max_time_s is None else time.monotonic() + req.max_time_s
    rows = halving(
        cands,
        workload,
        settings,
        PointStore(out / "points"),
        backend,
        deadline=deadline,
        on_stage=on_stage,
        on_point=on_point,
    )
    if not rows and req.max_time_s is not None:
        raise KvscopeError(
            f"no point finished within --max-time {req.max_time_s:g} s; give it more time "
            "(a rerun with the same arguments resumes)."
        )
    ranked = rank(rows, req.objective)
    last = max((r["rung"] for r in ranked), default=0)
    front = pareto([r for r in ranked if r["rung"] == last], req.objective)
    for r in ranked:
        r["pareto"] = r["key"] in front
    winner = ranked[0] if ranked and ranked[0].get("status") == "ok" else None
    default = next((r for r in ranked if r["default"]), None)
    summary: dict[str, Any] = {
        "kind": "tune",
        "search": "tune",
        "objective": req.objective,
        "slo": dict(req.slo),
        "model": req.base.model,
        "engine": req.base.engine,
        "backend": backend.describe(),
        "resumed": resumed,
        "workload_requests": len(workload),
        **facts,
        "points_finished": len(ranked),
        "pareto": front,
        "defaults": default,
        "winner": None,
        "slo_met_by_any": bool(winner and winner.get("slo_met")),
    }
    if winner is not None:
        cand = next(c for c in cands if c.label == winner["label"])
        command = launch_command(cand.cfg)
        if cand.point.replicas > 1:  # the line starts one replica; say how many and routed how
            command += f"  # on each of {cand.point.replicas} replicas, {cand.point.router} routing"
        winner = {**winner, "command": command}
        summary["winner"] = winner
        summary["gain_vs_defaults"] = gain(winner, default, req.objective)
        write_text_atomic(out / "command.txt", winner["command"] + "\n", "winner command")
    write_text_atomic(out / "ranked.json", json.dumps(ranked, indent=1, default=str), "ranking")
    write_text_atomic(
        out / "summary.json", json.dumps(_clean(summary), indent=2, default=str) + "\n", "summary"
    )
    summary["ranked"] = ranked
    return summary


def gain(winner: Mapping[str, Any], default: Mapping[str, Any] | None, objective: str) -> Any:
    """How much the winner beats vLLM's defaults: goodput and the objective, as fractions."""
    if default is None or default.get("status") != "ok":
        return None

    def rel(a: float, b: float) -> float | None:
        return (a - b) / b if b > 0 else None

    gw, gd = float(winner.get("goodput_per_s") or 0), float(default.get("goodput_per_s") or 0)
    out = {
        "goodput": rel(gw, gd),
        "goodput_per_dollar": rel(
            score(winner, "goodput-per-dollar"), score(default, "goodput-per-dollar")
        ),
        "defaults_met_slo": bool(default.get("slo_met")),
    }
    if objective == "max-rate":
        out["max_rate"] = rel(
            float(winner.get("max_rate_per_s") or 0), float(default.get("max_rate_per_s") or 0)
        )
    return out


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
