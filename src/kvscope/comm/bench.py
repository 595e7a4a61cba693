"""``kvscope comm bench``: latency percentiles and bandwidths of one collective over a size sweep.

:func:`run_bench` launches the ranks (:mod:`kvscope.comm.launch`), turns each size's
timings into a row as soon as they arrive (latency percentiles from
:mod:`kvscope.comm.latency`, nccl-tests bandwidths from :mod:`kvscope.comm.collectives`),
appends it to the run directory, and at the end fits the link's alpha and beta
(:mod:`kvscope.comm.model`) to the P50s and adds the model's prediction to every row.

Row fields: times in seconds (``lat_p50_s``, ...), bandwidths in GB/s (1e9 bytes/s, as
nccl-tests prints them), computed from the *mean* latency as nccl-tests does.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from kvscope.comm.collectives import (
    DTYPE_BYTES,
    algbw_bytes_per_s,
    buffers_for,
    busbw_bytes_per_s,
    canonical_dtype,
    canonical_op,
)
from kvscope.comm.latency import latency_fields, latency_stats
from kvscope.comm.launch import (
    Fault,
    Job,
    RankFailure,
    Step,
    require_torch,
)
from kvscope.comm.model import LinkFit, Measurement, fit_alpha_beta, predict_collective_time_s
from kvscope.comm.rundir import CommRunDir
from kvscope.comm.torchrun import execute, torchrun_rank
from kvscope.errors import KvscopeError, UnknownNameError
from kvscope.validate import bounded_alloc

BACKENDS = ("gloo", "nccl")
#: Called after each measured point with (points done, points in all, the new row).
ProgressFn = Callable[[int, int, dict[str, Any]], None]


@dataclass(frozen=True)
class BenchConfig:
    """One ``kvscope comm bench`` run. Sizes in bytes (nccl-tests' ``S``), times in seconds."""

    op: str
    sizes: tuple[int, ...]
    backend: str = "gloo"
    world_size: int = 2
    iters: int = 20
    warmup: int = 5
    dtype: str = "float32"
    timeout_s: float = 60.0
    fault: Fault | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "op", canonical_op(self.op))
        object.__setattr__(self, "dtype", canonical_dtype(self.dtype))
        check_common(self.backend, self.world_size, self.iters, self.warmup, self.timeout_s)
        if not self.sizes:
            raise KvscopeError("--sizes is empty.")
        elem = DTYPE_BYTES[self.dtype]
        biggest = 0
        for s in self.sizes:
            b = buffers_for(self.op, s, self.dtype, self.world_size)  # validates op x size x n
            biggest = max(biggest, (b.input_elems + b.output_elems) * elem)
        check_host_memory(self.backend, biggest, self.world_size, "the largest size's buffers")


def check_common(backend: str, world_size: int, iters: int, warmup: int, timeout_s: float) -> None:
    """Validate what every comm run shares (before any process starts)."""
    if backend not in BACKENDS:
        raise UnknownNameError("backend", backend, BACKENDS)
    if world_size < 1:
        raise KvscopeError(f"--world-size must be at least 1, got {world_size}.")
    if iters < 1 or warmup < 0:
        raise KvscopeError("--iters must be at least 1 and --warmup at least 0.")
    if not timeout_s > 0:
        raise KvscopeError(f"--timeout must be positive, got {timeout_s}.")


def check_backend(backend: str, world_size: int) -> None:
    """Fail with one clear line when this host cannot run ``backend`` on ``world_size`` ranks."""
    dist = require_torch()
    import torch

    if backend == "gloo" and not dist.is_gloo_available():
        raise KvscopeError(f"this torch build ({torch.__version__}) has no gloo backend.")
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise KvscopeError(
                f"--backend nccl needs CUDA GPUs, and torch {torch.__version__} sees none "
                "on this host (torch.cuda.is_available() is False).",
                "Use --backend gloo here, or run on a GPU host.",
            )
        if not dist.is_nccl_available():
            raise KvscopeError(f"this torch build ({torch.__version__}) has no NCCL backend.")
        gpus = torch.cuda.device_count()
        if gpus < world_size:
            raise KvscopeError(
                f"--backend nccl runs one rank per GPU: {world_size} ranks need "
                f"{world_size} GPUs, this host has {gpus}."
            )


def size_row(
    op: str, size_bytes: int, dtype: str, world_size: int, times_s: np.ndarray, wrong: list[int]
) -> dict[str, Any]:
    """One measured size as a flat row (see the module docstring)."""
    stats = latency_stats(times_s)
    return {
        "op": op,
        "size_bytes": size_bytes,
        "dtype": dtype,
        "world_size": world_size,
        **latency_fields(stats),
        "algbw_gbps": algbw_bytes_per_s(size_bytes, stats.mean_s) / 1e9,
        "busbw_gbps": busbw_bytes_per_s(op, size_bytes, stats.mean_s, world_size) / 1e9,
        "wrong_ranks": wrong,
    }


@dataclass(frozen=True)
class BenchResult:
    """Rows (one per size), the link fitted to them (None with fewer than 2 sizes)."""

    config: BenchConfig
    rows: list[dict[str, Any]]
    fit: LinkFit | None
    fit_note: str
    environment: dict[str, Any]
    out_dir: Path | None
    rank: int = 0  # under torchrun, the rank this process played; only rank 0 has rows

    def summary(self) -> dict[str, Any]:
        """The ``summary.json`` document (without kind and version)."""
        return bench_summary(self.config, self.rows, self.fit, self.fit_note, self.environment)


def bench_summary(
    config: BenchConfig,
    rows: list[dict[str, Any]],
    fit: LinkFit | None,
    fit_note: str,
    environment: dict[str, Any],
    error: str | None = None,
) -> dict[str, Any]:
    cfg = dataclasses.asdict(config)
    cfg["sizes"] = list(config.sizes)
    headline: dict[str, Any] = {}
    if rows:
        headline = {
            "lat_p50_s_smallest": rows[0]["lat_p50_s"],
            "lat_p99_s_smallest": rows[0]["lat_p99_s"],
            "busbw_gbps_peak": max(r["busbw_gbps"] for r in rows),
            "wrong_results": sum(len(r["wrong_ranks"]) for r in rows),
        }
    fitted = fit_dict(fit)
    if fitted is not None:
        headline.update(
            alpha_s=fitted["alpha_s"],
            link_bandwidth_gbps=fitted["bandwidth_gbps"],
            model_rms_rel_error=fitted["rms_rel_error"],
        )
    return {
        "status": "error" if error else "ok",
        "error": error,
        "pattern": "sweep",
        "config": cfg,
        "environment": environment,
        "headline": headline,
        "fit": fitted,
        "fit_note": fit_note,
        "rows": rows,
    }


def fit_dict(fit: LinkFit | None) -> dict[str, Any] | None:
    """A link fit as plain JSON fields (seconds, seconds per byte, GB/s)."""
    if fit is None:
        return None
    return {
        "alpha_s": fit.link.alpha_s,
        "beta_s_per_byte": fit.link.beta_s_per_byte,
        # None when beta is 0: the data showed no size dependence (infinite bandwidth).
        "bandwidth_gbps": (
            fit.link.bandwidth_bytes_per_s / 1e9 if fit.link.beta_s_per_byte > 0 else None
        ),
        "points": fit.points,
        "rms_rel_error": fit.rms_rel_error,
        "max_rel_error": fit.max_rel_error,
    }


def add_model(rows: list[dict[str, Any]]) -> tuple[LinkFit | None, str]:
    """Fit alpha-beta to the rows' P50s and add ``predicted_s`` and the measured/predicted ratio."""
    points = [Measurement(r["op"], r["size_bytes"], r["world_size"], r["lat_p50_s"]) for r in rows]
    try:
        fit = fit_alpha_beta(points)
    except KvscopeError as err:
        for r in rows:
            r["predicted_s"] = r["measured_over_predicted"] = r["p99_over_predicted"] = None
        return None, err.message
    for r in rows:
        pred = predict_collective_time_s(
            r["op"], r["size_bytes"], r["world_size"], fit.link.alpha_s, fit.link.beta_s_per_byte
        )
        r["predicted_s"] = pred
        r["measured_over_predicted"] = r["lat_p50_s"] / pred if pred > 0 else None
        # How far the tail sits above the model: what an SLA on this link must budget.
        r["p99_over_predicted"] = r["lat_p99_s"] / pred if pred > 0 else None
    return fit, "alpha-beta least squares on relative error of each size's P50"


_C = TypeVar("_C", bound="_Launchable")


class _Launchable(Protocol):
    @property
    def backend(self) -> str: ...
    @property
    def world_size(self) -> int: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def fault(self) -> Fault | None: ...


def prepare_launch(
    config: _C, out_dir: str | Path | None, force: bool = False
) -> tuple[_C, dict[str, Any], CommRunDir | None]:
    """What every measurement does first: under ``torchrun`` the launcher decides the world
    size; check the backend; open the run directory (refused when it holds a run, unless
    ``force``); capture the environment. Only the reporting rank (rank 0, or the parent when
    kvscope launches the ranks) writes the run directory."""
    from kvscope.comm.environment import capture_environment

    under = torchrun_rank()
    if under is not None and under[1] != config.world_size:
        config = dataclasses.replace(config, world_size=under[1])  # type: ignore[type-var]
    check_backend(config.backend, config.world_size)
    reporting = under is None or under[0] == 0
    run_dir = CommRunDir(out_dir, force=force) if out_dir is not None and reporting else None
    env = capture_environment(config.backend, config.world_size)
    return config, env, run_dir


def ranks_on_this_host(world_size: int) -> int:
    """How many of the ranks share this host's memory (torchrun says; else all of them)."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(local) if local.isdigit() and 0 < int(local) <= world_size else world_size


def check_host_memory(backend: str, per_rank_bytes: float, world_size: int, what: str) -> None:
    """Refuse, before any rank starts, gloo buffers that cannot fit in this host's memory."""
    if backend == "gloo":
        n = ranks_on_this_host(world_size)
        bounded_alloc(
            per_rank_bytes * n,
            f"{what} on {n} gloo rank(s)",
            "Use smaller sizes or fewer ranks.",
        )


RowFn = Callable[[int, np.ndarray, list[int]], dict[str, Any]]


def measure_steps(
    config: _Launchable,
    steps: tuple[Step, ...],
    run_dir: CommRunDir | None,
    progress: ProgressFn | None,
    make_row: RowFn,
    failed_summary: Callable[[list[dict[str, Any]], str], dict[str, Any]],
) -> tuple[list[dict[str, Any]], int]:
    """Run ``steps`` on the ranks; each step's row (``make_row(index, times, wrong)``) goes to
    the run directory as it is measured. If a rank fails, the run directory is finished with
    ``failed_summary(rows, message)`` -- what was measured stays -- and the error is raised."""
    rows: list[dict[str, Any]] = []

    def on_step(index: int, times: np.ndarray, wrong: list[int]) -> None:
        row = make_row(index, times, wrong)
        rows.append(row)
        if run_dir is not None:
            run_dir.append(row, times)
        if progress is not None:
            progress(len(rows), len(steps), row)

    job = Job(config.backend, config.world_size, steps, config.timeout_s, fault=config.fault)
    try:
        rank = execute(job, on_step)
    except RankFailure as err:
        if run_dir is not None:
            run_dir.finish(rows, failed_summary(rows, err.message))
        raise
    return rows, rank


def run_bench(
    config: BenchConfig,
    out_dir: str | Path | None = None,
    progress: ProgressFn | None = None,
    *,
    force: bool = False,
) -> BenchResult:
    """Measure ``config`` for real; write the run directory as it goes when ``out_dir`` is set
    (an existing run there is refused unless ``force``)."""
    config, env, run_dir = prepare_launch(config, out_dir, force)
    steps = tuple(
        Step(config.op, s, config.dtype, config.warmup, config.iters) for s in config.sizes
    )

    def make_row(index: int, times: np.ndarray, wrong: list[int]) -> dict[str, Any]:
        b = buffers_for(config.op, config.sizes[index], config.dtype, config.world_size)
        return size_row(config.op, b.size_bytes, config.dtype, config.world_size, times, wrong)

    rows, rank = measure_steps(
        config,
        steps,
        run_dir,
        progress,
        make_row,
        lambda done, message: bench_summary(config, done, None, "", env, message),
    )
    fit, note = add_model(rows) if rows else (None, "")
    result = BenchResult(config, rows, fit, note, env, Path(out_dir) if out_dir else None, rank)
    if run_dir is not None:
        run_dir.finish(rows, result.summary())
    return result
