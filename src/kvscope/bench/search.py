"""``--find-max-rate``: the highest Poisson request rate whose run meets every SLO.

Each probe is a full bench run (its own run directory ``probe_NN_<rate>/``) at one rate with
the workload's lengths. A probe passes when every ``--slo`` percentile holds, the error rate
stays within ``--max-error-rate`` and the client was not the limit (a client-limited probe
says nothing about the server, so the search stops there and says so). The rate doubles from
``start_rate`` until a probe fails, then bisects until the bracket is within ``tolerance``
(relative), ``max_probes`` runs were spent or, when even the first rate fails, the rate
halved below a quarter of it — the bounded form of the SLA search that vLLM's
``serve_sla`` and AIPerf offer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvscope.bench.client import ClientConfig
from kvscope.bench.run import (
    BenchOptions,
    check_out,
    check_window,
    load_for,
    make_builder,
    run_bench,
)
from kvscope.errors import KvscopeError
from kvscope.results import RunDir
from kvscope.validate import count, finite
from kvscope.workload.stream import Workload


def _workload_at(
    rate: float,
    build_args: tuple[Any, ...],
    max_model_len: int | None,
    fmt: str | None,
    skip_bad: bool,
) -> Workload:
    from kvscope.workload.spec import build_workload

    workload, _arrival, prompt_len, output_len, duration, num_requests, _speedup, seed = build_args
    if workload is not None:
        w = build_workload(
            workload,
            None,
            prompt_len,
            output_len,
            duration,
            num_requests,
            None,
            seed,
            max_model_len,
            fmt=fmt,
            skip_bad=skip_bad,
        )
        return w.rescale_rate(rate)
    if duration is None and num_requests is None:
        raise KvscopeError("--find-max-rate needs --duration or --num-requests per probe.")
    return build_workload(
        None,
        f"poisson:rate={rate:g}",
        prompt_len,
        output_len,
        duration,
        num_requests,
        None,
        seed,
        max_model_len,
        fmt=fmt,
        skip_bad=skip_bad,
    )


def find_max_rate(
    client: ClientConfig,
    options: BenchOptions,
    build_args: tuple[Any, ...],
    out: Path,
    *,
    max_rate: float = 1000.0,
    start_rate: float = 1.0,
    max_probes: int = 10,
    tolerance: float = 0.1,
    max_concurrency: int | None = None,
    load_kw: dict[str, Any] | None = None,
    max_model_len: int | None = None,
    fmt: str | None = None,
    skip_bad: bool = False,
    log: Callable[[str], None] | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Search, write ``out/summary.json`` (kind bench, with the probes) and return it.

    ``out`` must be absent or empty unless ``force`` (checked before the first request).
    A probe that cannot run after others did ends the search with what they found.
    """
    if not options.slo:
        raise KvscopeError("--find-max-rate needs --slo.")
    finite(start_rate, "--start-rate", low=0, low_open=True)
    finite(max_rate, "--max-rate", low=0, low_open=True)
    finite(tolerance, "the search tolerance", low=0, low_open=True)
    count(max_probes, "the number of probes", low=1)
    if start_rate > max_rate:
        raise KvscopeError(
            f"--max-rate {max_rate:g} must be at least the start rate ({start_rate:g} req/s)."
        )
    first = _workload_at(start_rate, build_args, max_model_len, fmt, skip_bad)
    check_window(first, load_for(first, max_concurrency, **(load_kw or {})))
    check_out(out, force)
    client.headers()  # credentials that cannot be sent fail here, once
    builder, facts = make_builder(client, options)
    run_dir = RunDir(out, "bench", force=force)
    probes: list[dict[str, Any]] = []
    best: float | None = None
    low, high = 0.0, None
    rate = start_rate
    stopped = ""
    for k in range(max_probes):
        probe_dir = out / f"probe_{k:02d}_{rate:g}"
        try:
            w = first if k == 0 else _workload_at(rate, build_args, max_model_len, fmt, skip_bad)
            load = load_for(w, max_concurrency, **(load_kw or {}))
            s = run_bench(client, load, w, probe_dir, options, builder=builder)
        except KvscopeError as err:
            if not probes:
                raise
            # e.g. --warmup longer than a faster probe's schedule: keep what was measured
            stopped = f"probe at {rate:g} req/s could not run: {err.one_line()}"
            break
        verdict = "pass"
        if s.get("client_limited"):
            verdict = "client-limited"
        elif s.get("error_rate_exceeded"):
            verdict = "errors"
        elif not s.get("slo_all_met"):
            verdict = "slo-missed"
        probes.append(
            {
                "rate_per_s": rate,
                "achieved_request_rate_per_s": s.get("achieved_request_rate_per_s"),
                "ttft_p99_s": s.get("ttft_p99_s"),
                "tpot_p99_s": s.get("tpot_p99_s"),
                "error_rate": s.get("error_rate", 0.0),
                "verdict": verdict,
                "run_dir": str(probe_dir),
            }
        )
        if log:
            log(f"probe {k + 1}: {rate:g} req/s -> {verdict}")
        if s.get("interrupted"):
            stopped = "interrupted"
            break
        if verdict == "client-limited":
            stopped = f"the client could not hold {rate:g} req/s; the search stops there"
            break
        if verdict == "pass":
            best = rate
            low = rate
        else:
            high = rate
        if high is None:
            if rate >= max_rate:
                stopped = f"passed up to --max-rate {max_rate:g}"
                break
            rate = min(rate * 2, max_rate)
        else:
            if high - low <= tolerance * high:
                break
            if low == 0 and high / 2 < start_rate / 4:
                stopped = f"no rate down to {high:g} req/s met the SLOs"
                break
            rate = (low + high) / 2 if low > 0 else high / 2
    result: dict[str, Any] = {
        "search": "max_rate",
        "slo": dict(options.slo),
        "max_rate_per_s": best,
        "bracket_per_s": [low, high],
        "probes": probes,
        "stopped": stopped,
    }
    run_dir.write_summary(
        {"server": client.public(), "slo": dict(options.slo), "preflight": facts}, result
    )
    return result
