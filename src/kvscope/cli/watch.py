"""``kvscope watch``: sample GPUs (NVML) and engines (/metrics), store, export, summarise."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kvscope.cli.output import print_json, stdout
from kvscope.errors import KvscopeError

if TYPE_CHECKING:
    from rich.table import Table

    from kvscope.telemetry.watch import Watch

#: Highest sampling rate: 10 Hz (100 ms sampling is what diagnosing a KV-cache spike needs).
MIN_INTERVAL_S = 0.1


class WatchFailed(KvscopeError):
    """The watch could not get (or keep) what it was asked for: exit 1, not a usage error."""

    exit_code = 1


_SHOWN = (
    ("gpu_memory_used_bytes", "mem used GiB", 2**-30),
    ("gpu_utilization_ratio", "util %", 100.0),
    ("gpu_power_watts", "power W", 1.0),
    ("gpu_temperature_celsius", "temp °C", 1.0),
    ("kv_cache_usage_ratio", "KV %", 100.0),
    ("requests_running", "running", 1.0),
    ("requests_waiting", "waiting", 1.0),
    ("preemptions_per_second", "preempt/s", 1.0),
    ("generation_tokens_per_second", "gen tok/s", 1.0),
)


def _table(w: Watch) -> Table:
    from rich.table import Table

    latest = w.latest()
    sources = sorted({src for src, _, _ in latest})
    table = Table(
        title=f"kvscope watch · tick {w.state.ticks} · {w.state.rows_flushed} rows stored"
    )
    table.add_column("source")
    shown = [(m, h, k) for m, h, k in _SHOWN if any(key[1] == m for key in latest)]
    for _, header, _ in shown:
        table.add_column(header, justify="right")
    for src in sources:
        cells = []
        for metric, _, scale in shown:
            v = latest.get((src, metric, ""))
            cells.append("" if v is None else f"{v * scale:,.2f}")
        table.add_row(src, *cells)
    return table


def watch(
    nvml: bool = typer.Option(False, "--nvml", help="Sample local GPUs through NVML."),
    nvml_replay: Path | None = typer.Option(
        None, "--nvml-replay", help="Replay a recorded NVML JSON file instead of the driver."
    ),
    engine: list[str] = typer.Option(
        [], "--engine", help="Engine base URL or /metrics URL (repeatable)."
    ),
    interval: float = typer.Option(1.0, "--interval", help="Seconds between samples (>= 0.1)."),
    duration: float | None = typer.Option(None, "--duration", help="Stop after this many seconds."),
    store: Path = typer.Option(Path("kvscope.duckdb"), "--store", help="DuckDB file to append to."),
    no_store: bool = typer.Option(False, "--no-store", help="Keep samples in memory only."),
    flush: float = typer.Option(
        5.0, "--flush", help="Seconds between store transactions (a SIGKILL loses at most this)."
    ),
    window: float = typer.Option(300.0, "--window", help="Window of derived peaks/slopes (s)."),
    exporter_port: int | None = typer.Option(
        None, "--exporter-port", help="Serve Prometheus /metrics on this port (0 = any free)."
    ),
    listen: str = typer.Option("127.0.0.1", "--listen", help="Exporter bind address."),
    out: Path | None = typer.Option(None, "--out", help="Write a run directory here at the end."),
    force: bool = typer.Option(False, "--force", help="Replace --out when it already holds a run."),
    log_batches: bool = typer.Option(
        False, "--log-batches", help="Log start and each committed store batch to stderr."
    ),
    rules: Path | None = typer.Option(
        None, "--rules", help="Evaluate these alert rules live ('default' for kvscope's pack)."
    ),
    kv_events: list[str] = typer.Option(
        [], "--kv-events", help="Engine KV-event publisher, tcp://HOST:PORT (repeatable)."
    ),
    kv_events_topic: str = typer.Option("", "--kv-events-topic", help="KV-event topic."),
    kv_events_replay: list[str] = typer.Option(
        [], "--kv-events-replay", help="Replay socket per --kv-events, tcp://HOST:PORT."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Sample GPUs and engines until Ctrl-C, SIGTERM or --duration; everything is flushed."""
    from kvscope.telemetry.gpu import GpuSampler
    from kvscope.telemetry.nvml import Nvml, NvmlUnavailable
    from kvscope.telemetry.nvml_replay import open_replay
    from kvscope.telemetry.watch import Watch, WatchConfig
    from kvscope.validate import fresh_run_dir, writable_dir

    if interval < MIN_INTERVAL_S:
        raise KvscopeError(f"--interval {interval} is below {MIN_INTERVAL_S} s (10 Hz at most).")
    # Every input is checked here, before a GPU is opened or a sample taken: a bad value must
    # not surface when the watch ends (with the samples of a --no-store session lost).
    cfg = WatchConfig(
        interval_s=interval,
        duration_s=duration,
        engines=tuple(engine),
        store_path=None if no_store else store,
        flush_s=flush,
        window_s=window,
        exporter_port=exporter_port,
        listen=listen,
        out_dir=out,
        force=force,
    )
    if out is not None:
        # Not destructive here: with --force the earlier run is removed only once the store
        # and the exporter are up (Watch.run), so a failed start leaves it in place.
        if force:
            writable_dir(out, "watch run directory")
        else:
            fresh_run_dir(out, what="watch run directory")
    pack: Any = None
    if rules is not None:
        from kvscope.alerts.loader import load_pack

        pack = load_pack(None if str(rules) == "default" else rules)
    gpus: GpuSampler | None = None
    nvml_problem: NvmlUnavailable | None = None
    if nvml_replay is not None:
        try:
            gpus = GpuSampler(open_replay(nvml_replay))
        except NvmlUnavailable as err:  # a recording of a host without driver or GPU
            nvml_problem = err
    elif nvml:
        try:
            gpus = GpuSampler(Nvml.open())
        except NvmlUnavailable as err:
            nvml_problem = err
    if gpus is not None and gpus.nvml.device_count == 0:
        nvml_problem, gpus = NvmlUnavailable("NVML sees no GPU on this machine"), None
    if nvml_problem is not None:
        # Told at once, before the first sample: a GPU watch without GPUs is not a success.
        if not engine:
            raise WatchFailed(
                f"{nvml_problem.message}; nothing else to watch.",
                nvml_problem.hint or "Watch an engine too: --engine URL.",
            )
        hint = f" ({nvml_problem.hint})" if nvml_problem.hint else ""
        sys.stderr.write(
            f"kvscope watch: warning: {nvml_problem.message}; GPU metrics will be missing{hint}.\n"
        )
        sys.stderr.flush()
    kv_live: Any = None
    if kv_events or kv_events_replay:
        from kvscope.telemetry.kv_events.config import kv_events_live

        kv_live = kv_events_live(kv_events, kv_events_topic, kv_events_replay)
    if gpus is None and not engine and kv_live is None:
        raise KvscopeError(
            "nothing to watch.", "Pass --nvml, --engine URL and/or --kv-events tcp://HOST:PORT."
        )
    live: Any = None

    def on_flush(batches: int, rows: int) -> None:
        sys.stderr.write(f"kvscope watch: batch {batches} committed, {rows} rows\n")
        sys.stderr.flush()

    def on_start(ww: Watch) -> None:
        if ww.exporter is not None:
            sys.stderr.write(
                f"kvscope watch: exporter on http://{ww.exporter.host}:{ww.exporter.port}/metrics\n"
            )
        if log_batches:
            n_gpus = ww.gpus.nvml.device_count if ww.gpus else 0
            sys.stderr.write(
                f"kvscope watch: started, {len(ww.engines)} engine(s), {n_gpus} GPU(s), "
                f"every {interval} s\n"
            )
        sys.stderr.flush()

    def on_warning(line: str) -> None:
        sys.stderr.write(f"kvscope watch: warning: {line}\n")
        sys.stderr.flush()

    w = Watch(
        cfg,
        gpus=gpus,
        on_flush=on_flush if log_batches else None,
        on_start=on_start,
        on_warning=on_warning,
        kv_events=kv_live,
    )
    if kv_live is not None:
        kv_live.on_warning = on_warning

    alerts: Any = None
    if pack is not None:
        from kvscope.alerts.live import WatchAlerts

        alerts = WatchAlerts(pack, write=lambda line: sys.stderr.write(line + "\n"))
        w.on_tick = alerts

    def stop(signum: int, _frame: Any) -> None:
        # Not w.stop.set() here: the handler runs on the main thread, which may be inside
        # w.stop.wait() holding the event's lock at that instant (Condition._acquire_restore),
        # and Event.set() would then wait for that same lock forever. A short-lived thread
        # sets it once the handler has returned and the lock is free again.
        threading.Thread(target=w.stop.set, name="kvscope-stop", daemon=True).start()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    if stdout.is_terminal and not json_out:
        from rich.live import Live

        live = Live(_table(w), console=stdout, refresh_per_second=4, transient=False)
        w.on_tick = lambda ww: live.update(_table(ww))
        if alerts is not None:
            alerts.then = w.on_tick
            w.on_tick = alerts
        live.start()
    try:
        summary = w.run()
    finally:
        if live is not None:
            live.stop()
    if alerts is not None:
        summary["alerts"] = alerts.summary()
    if json_out:
        print_json(summary)
    else:
        _print_summary(summary)
    code, line = verdict(summary, None if nvml_problem is None else nvml_problem.why)
    if line:
        sys.stderr.write(f"kvscope watch: {line}\n")
    if code:
        raise typer.Exit(code)


def verdict(summary: dict[str, Any], nvml_problem: str | None = None) -> tuple[int, str]:
    """Exit code and closing stderr line ("" if none) of a finished watch.

    Exit 1 when the store stopped taking writes, or when no source asked for produced a
    sample: the run completed (what was sampled is kept) but a script must not read it as a
    success. Exit 0 with a warning line when some sources answered and others did not.
    """
    never = list(summary["engines_never_up"])
    engines = summary["config"]["engines"]
    errors: dict[str, str] = summary["engine_errors"]
    faults: list[str] = []
    if nvml_problem:
        faults.append(f"NVML not available: {nvml_problem}")
    never_sources = {"engine:" + u.partition("://")[2].partition("/")[0] for u in never}
    if never:
        whys = [e for src, e in errors.items() if src in never_sources]
        faults.append(f"no sample from {', '.join(never)} ({'; '.join(whys) or 'no answer'})")
    for source, n in summary["engine_faults"].items():
        if n and source not in never_sources:
            faults.append(f"{source} failed {n} scrape(s) (last: {errors.get(source, '?')})")
    store_error = summary.get("store_error")
    if store_error:
        out = summary["config"].get("out_dir")
        kept = f"every sample is in {out}" if out else "samples after it were lost (no --out)"
        return 1, f"error: {store_error}; {kept}."
    produced = len(engines) - len(never) + (1 if summary["gpus"] else 0)
    kv = summary.get("kv_events") or {}
    produced += sum(1 for c in kv.get("endpoints", {}).values() if c["batches"])
    lost = sum(c["lost"] for c in kv.get("endpoints", {}).values())
    if lost:
        faults.append(f"{lost} KV-event batch(es) lost to sequence gaps")
    if produced <= 0 and summary["ticks"] and not faults:
        faults.append("no KV-event batch arrived")
    if produced <= 0 and summary["ticks"]:
        return 1, "error: " + "; ".join(faults) + "."
    if faults:
        return 0, "warning: finished with faults: " + "; ".join(faults) + "."
    return 0, ""


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.table import Table

    stdout.print(
        f"watched {summary['duration_s']:.1f} s: {summary['ticks']} ticks "
        f"({summary['missed_ticks']} missed), {summary['samples']} samples, "
        f"{summary['store_rows']} stored"
    )
    waves = summary["waveforms"]
    if not waves:
        return
    t = Table(title="waveforms")
    t.add_column("series", overflow="fold")
    for col in ("peak", "trough", "amplitude", "period s", "phase", "leak MB/min"):
        t.add_column(col, justify="right")

    def f(v: float | None, fmt: str = ",.3g") -> str:
        return "" if v is None else format(v, fmt)

    for name, w in waves.items():
        t.add_row(
            name,
            f(w["peak"]),
            f(w["trough"]),
            f(w["amplitude"]),
            f(w["dominant_period_s"], ".1f"),
            f(w["peak_phase"], ".2f"),
            f(w["leak_slope_mb_per_min"], ".2f"),
        )
    stdout.print(t)
