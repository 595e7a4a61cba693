"""The public entry point: ``run_bench`` measures one workload against one live server.

Steps: check the server and calibrate prompt lengths (:mod:`kvscope.bench.preflight`), render
every prompt and request body before the clock starts (no tokenising or JSON encoding on the
sending path), run the load (:mod:`kvscope.bench.runner`), and write ``summary.json`` (kind
``bench``) next to ``requests.parquet``, ``chunks.parquet`` and ``server.parquet``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvscope.bench.client import ClientConfig, make_body
from kvscope.bench.metrics import asked_rate_of, summarize
from kvscope.bench.preflight import check_and_calibrate
from kvscope.bench.prompts import PromptBuilder, TokenizerBackend, describe
from kvscope.bench.records import BENCH_REQUEST_SCHEMA
from kvscope.bench.runner import LoadConfig, Prepared, run_loop, run_prepared
from kvscope.errors import KvscopeError
from kvscope.results import read_summary
from kvscope.validate import finite, fresh_run_dir, writable_dir
from kvscope.workload.stream import Workload

#: Refuse to pre-render more request bodies than this (bytes, estimated at 8 per token).
MAX_PREPARED_BYTES = 4 * 1024**3
#: Requests prepared for a closed loop (``--arrival concurrency:n=N``) given ``--duration``
#: and no ``--num-requests``: the loop stops issuing when the duration is over, and warns if
#: it sent them all before (about 80 MiB of prompts at 1024 tokens).
CLOSED_LOOP_REQUESTS = 10_000


def closed_loop_requests(
    arrival: str | None, num_requests: int | None, duration_s: float | None
) -> int | None:
    """``--num-requests`` for the workload: :data:`CLOSED_LOOP_REQUESTS` for a closed loop
    bounded by ``--duration`` alone, else ``num_requests`` as given."""
    from kvscope.workload.arrivals import Concurrency
    from kvscope.workload.spec import parse_arrival

    if num_requests is not None or duration_s is None or arrival is None:
        return num_requests
    return CLOSED_LOOP_REQUESTS if isinstance(parse_arrival(arrival), Concurrency) else None


@dataclass(frozen=True)
class BenchOptions:
    """Run-level options that are not about the load shape or the wire."""

    slo: Mapping[str, float] = field(default_factory=dict)
    max_error_rate: float = 0.05
    tokenizer: str | None = None
    seed: int = 0
    preflight_timeout_s: float = 30.0
    preflight: bool = True

    def __post_init__(self) -> None:
        finite(self.max_error_rate, "--max-error-rate", low=0, high=1)
        finite(self.preflight_timeout_s, "the preflight timeout", low=0, low_open=True)
        for name, limit in self.slo.items():
            finite(limit, f"--slo {name}", low=0, low_open=True)


def check_out(out: str | Path, force: bool = False) -> Path:
    """Before any work: ``out`` can hold a new run (absent or empty, or ``force`` to replace).

    Nothing is removed here: with ``force`` the earlier run is replaced only when the new run
    starts (after the server check), so a run that cannot start leaves it in place.
    """
    if force:
        return writable_dir(out, "run directory")
    return fresh_run_dir(out)


def check_window(workload: Workload, load: LoadConfig) -> None:
    """Refuse warm-up and cool-down that leave nothing of a scheduled run to measure."""
    if load.closed_loop is not None or not (load.warmup_s or load.cooldown_s):
        return
    arr = workload.arrival_s
    span = float(arr.max() - arr.min()) if len(arr) else 0.0
    if load.warmup_s + load.cooldown_s >= span:
        raise KvscopeError(
            f"--warmup {load.warmup_s:g} s and --cooldown {load.cooldown_s:g} s leave nothing "
            f"of the {span:.3g} s schedule to measure.",
            hint="Shorten them, or lengthen the run (--duration, --num-requests).",
        )


def prepare(workload: Workload, builder: PromptBuilder, client: ClientConfig) -> Prepared:
    """Render every request's prompt and JSON body (arrival times shifted to start at 0)."""
    w = workload.shift_to_zero()
    est = int(w.prompt_tokens.sum()) * 8
    if est > MAX_PREPARED_BYTES:
        raise KvscopeError(
            f"the workload's prompts would take about {est / 1024**3:.1f} GiB to prepare.",
            hint="Limit it with --num-requests or --duration.",
        )
    bodies = []
    outs = [max(1, int(n)) for n in w.output_tokens.tolist()]
    for i, req in enumerate(w):
        bodies.append(make_body(client, builder.build(req, i), outs[i]))
    return Prepared(
        arrival_s=w.arrival_s.tolist(),
        request_ids=[str(x) for x in w.request_ids.tolist()],
        bodies=bodies,
        prompt_tokens=w.prompt_tokens.tolist(),
        output_tokens=outs,
    )


def make_builder(
    client: ClientConfig, options: BenchOptions
) -> tuple[PromptBuilder, dict[str, Any]]:
    """Check the server and build the prompt renderer (calibrated unless a tokenizer is given)."""
    tok = TokenizerBackend(options.tokenizer) if options.tokenizer else None
    builder = PromptBuilder(tokenizer=tok, seed=options.seed)
    facts: dict[str, Any] = {}
    if options.preflight:
        cal, facts = run_loop(
            lambda: check_and_calibrate(client, builder, options.preflight_timeout_s)
        )
        if cal is not None:
            builder = PromptBuilder(calibration=cal, seed=options.seed)
    return builder, facts


def load_for(workload: Workload, max_concurrency: int | None, **kw: Any) -> LoadConfig:
    """The load shape a workload asks for: closed loop when its spec says so."""
    closed = workload.spec.get("closed_loop") if hasattr(workload.spec, "get") else None
    if closed and kw.get("cooldown_s"):
        raise KvscopeError(
            "--cooldown needs scheduled arrivals; a closed loop has no scheduled end.",
            hint="Use --warmup, or an open-loop --arrival.",
        )
    if closed and max_concurrency is not None:
        raise KvscopeError(
            "--max-concurrency caps an open-loop rate; a closed loop already has "
            "concurrency:n=N requests in flight."
        )
    if closed:
        duration = workload.spec.get("duration_s")
        return LoadConfig(
            closed_loop=int(closed["concurrency"]),
            think_s=float(closed.get("think_s") or 0.0),
            duration_s=float(duration) if isinstance(duration, int | float) else None,
            **kw,
        )
    return LoadConfig(max_concurrency=max_concurrency, **kw)


def run_bench(
    client: ClientConfig,
    load: LoadConfig,
    workload: Workload,
    out: str | Path,
    options: BenchOptions | None = None,
    *,
    builder: PromptBuilder | None = None,
    progress: Callable[[Mapping[str, float]], None] | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Measure ``workload`` against the server; returns the written ``summary.json``.

    ``out`` must be absent or empty unless ``force``; that is checked before the server is.
    """
    opts = options or BenchOptions()
    if len(workload) == 0:
        raise KvscopeError("the workload has no requests.")
    check_window(workload, load)
    check_out(out, force)
    client.headers()  # credentials that cannot be sent fail here, not on every request
    facts: dict[str, Any] = {}
    if builder is None:
        builder, facts = make_builder(client, opts)
    prepared = prepare(workload, builder, client)
    run_dir, state = run_prepared(client, load, prepared, Path(out), progress, force=force)
    figures = summarize(
        state.rows,
        BENCH_REQUEST_SCHEMA,
        state.itl_gaps,
        open_loop=load.closed_loop is None,
        capped=load.max_concurrency is not None,
        slo=opts.slo,
        max_error_rate=opts.max_error_rate,
        asked_rate=asked_rate_of(workload.spec) if hasattr(workload.spec, "get") else None,
    )
    short = _closed_loop_ran_short(load, state.released, len(prepared), state.wall_s)
    if short:
        figures["warnings"] = [*figures.get("warnings", []), short]
    config = {
        "server": client.public(),
        "load": load.describe(),
        "workload": dict(workload.spec),
        "prompts": describe(builder),
        "slo": dict(opts.slo),
        "seed": opts.seed,
    }
    run_dir.write_summary(
        config,
        figures,
        interrupted=state.interrupted,
        unfinished_at_drain=state.unfinished,
        requests_released=state.released,
        requests_not_sent=state.released - len(state.rows),
        wall_s=state.wall_s,
        server_metrics=state.probe,
        preflight=facts,
    )
    summary = read_summary(run_dir.path)
    assert summary is not None
    return summary


def _closed_loop_ran_short(load: LoadConfig, released: int, prepared: int, wall_s: float) -> str:
    """A warning when a closed loop with ``--duration`` sent every prepared request before the
    duration was over (the run measured less than was asked), else ''."""
    if load.closed_loop is None or load.duration_s is None or released < prepared:
        return ""
    if wall_s >= load.duration_s:
        return ""
    return (
        f"the closed loop sent all {prepared:,} requests in {wall_s:.1f} s, before --duration "
        f"{load.duration_s:g} s was over (it stops at whichever comes first; a larger "
        "--num-requests runs longer)"
    )
