"""The ``kvscope watch`` loop: sample GPUs and engines, keep history, export, summarise.

Each tick (drift-free, :mod:`kvscope.telemetry.schedule`) samples every GPU through NVML and
scrapes every engine, updates the exporter's board, and queues the samples. Queued samples
go to the store in one transaction every ``flush_s`` seconds, so a SIGKILL loses at most
that last batch. Derived series (KV-usage peak over the window, GPU-memory leak slope by
Theil-Sen) are recomputed every ``derive_every_s``. On stop (SIGINT/SIGTERM set the stop
event) everything queued is flushed and, with ``out_dir``, a run directory is written:
``summary.json`` and ``server.parquet`` (``t_s`` first, seconds from the run's start, one
column per series in base units).

Everything that can fail for a reason the user can fix fails before the first sample, in one
line: the configuration (:class:`WatchConfig` checks itself), the store (refused if it is not
kvscope's), the exporter's port and the run directory (refused when it holds a run, unless
``force``). URLs are stored, served and shown without their credentials.

Nothing fails silently once sampling runs: an engine that does not answer is told through
``on_warning`` on the tick it fails, by cause (connection refused, timed out, HTTP 404, not a
metrics page), once per outage and cause, and again when it answers; a store that stops
taking writes (disk full) is told at once, and the samples it did not take are kept for the
run directory. The summary says what was missing (``engines_never_up``, ``engine_errors``,
``store_error``) so the caller can exit non-zero.
"""

from __future__ import annotations

import gc
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvscope import __version__
from kvscope.errors import KvscopeError
from kvscope.redact import redact_text, redact_url
from kvscope.telemetry.engine import EngineScraper, engine_url
from kvscope.telemetry.exporter import Exporter, LatestValues, listen_address
from kvscope.telemetry.gpu import GpuSampler
from kvscope.telemetry.schedule import Ticker
from kvscope.telemetry.series import Sample
from kvscope.telemetry.store import Store
from kvscope.telemetry.watch_output import StoreWriter, make_dir, write_run_dir
from kvscope.telemetry.waveform import Waveform, analyse, theil_sen_slope
from kvscope.validate import count, finite, fresh_run_dir

#: Series whose waveform the summary reports, per source kind.
WAVEFORM_SERIES = {"gpu": "gpu_memory_used_bytes", "engine": "kv_cache_usage_ratio"}
#: Name of the windowed peak derived from each watched series.
PEAK_NAMES = {
    "gpu_memory_used_bytes": "gpu_memory_used_peak_bytes",
    "kv_cache_usage_ratio": "kv_cache_usage_peak_ratio",
}
#: Points of the window the live leak slope is fitted on: Theil-Sen costs O(n^2) pairs, and
#: 60 points (every 5 s of a 300 s window) keep its 29 % breakdown point while costing a
#: twenty-fifth of 300 points' CPU every ``derive_every_s``.
SLOPE_POINTS = 60
#: Activity series the waveform phase is measured against (engines only).
ACTIVITY_SERIES = "requests_running"
#: Longest --duration: a year. Longer is a typo (1e30), and a watch meant to run for ever is
#: run without --duration.
MAX_DURATION_S = 366 * 86400.0


@dataclass(frozen=True, slots=True)
class WatchConfig:
    """What to watch and where results go. Times in seconds."""

    interval_s: float = 1.0
    duration_s: float | None = None
    engines: tuple[str, ...] = ()
    store_path: Path | None = None
    #: Seconds between store transactions: a SIGKILL loses at most this much. Each COMMIT
    #: costs ~10-20 ms of CPU after an idle spell (measured, benchmarks/RESULTS.md), so 5 s
    #: keeps the store's share of a 10 Hz session under half a percent of a core.
    flush_s: float = 5.0
    window_s: float = 300.0
    #: Derived series change over the window (minutes): recomputing them once per default
    #: Prometheus scrape interval (15 s, prometheus.io configuration docs) is what a scrape
    #: can see, and keeps their Theil-Sen fits off most ticks.
    derive_every_s: float = 15.0
    exporter_port: int | None = None
    listen: str = "127.0.0.1"
    out_dir: Path | None = None
    #: Replace ``out_dir`` when it already holds a run (else that is refused at the start).
    force: bool = False

    def __post_init__(self) -> None:
        # Checked here, not at the end: a NaN duration never stops, a bad port or URL would
        # otherwise surface after the session (or never).
        finite(self.interval_s, "--interval", low=0.0, low_open=True)
        if self.duration_s is not None:
            finite(self.duration_s, "--duration", low=0.0, low_open=True, high=MAX_DURATION_S)
            if self.interval_s > self.duration_s:
                raise KvscopeError(
                    f"--interval {self.interval_s:g} is longer than --duration "
                    f"{self.duration_s:g}: not one sample would be taken."
                )
        finite(self.flush_s, "--flush", low=0.0, low_open=True)
        finite(self.window_s, "--window", low=0.0, low_open=True)
        finite(self.derive_every_s, "derive_every_s", low=0.0, low_open=True)
        if self.exporter_port is not None:
            count(self.exporter_port, "--exporter-port", low=0, high=65535)
        listen_address(self.listen)
        for url in self.engines:
            engine_url(url)
        out, store = self.out_dir, self.store_path
        if out is not None and store is not None and Path(out).resolve() == Path(store).resolve():
            raise KvscopeError(f"--out and --store both name {out}.")


@dataclass
class WatchState:
    """Counters the live table and the summary read."""

    ticks: int = 0
    samples: int = 0
    rows_flushed: int = 0
    batches: int = 0
    started_unix_s: float = 0.0


class Watch:
    """One watch session. Build it, then :meth:`run` (blocks until stopped or done)."""

    def __init__(
        self,
        config: WatchConfig,
        gpus: GpuSampler | None = None,
        engines: list[EngineScraper] | None = None,
        on_tick: Callable[[Watch], None] | None = None,
        on_flush: Callable[[int, int], None] | None = None,
        on_start: Callable[[Watch], None] | None = None,
        on_warning: Callable[[str], None] | None = None,
        kv_events: Any = None,
    ) -> None:
        self.config = config
        #: A ``kv_events.live.KvEventsLive`` (watch --kv-events), or None.
        self.kv_events = kv_events
        self.kv_events_summary: dict[str, Any] | None = None
        self.gpus = gpus
        self.engines = (
            engines
            if engines is not None
            else [EngineScraper(url, window_s=min(config.window_s, 60.0)) for url in config.engines]
        )
        self.on_tick = on_tick
        self.on_flush = on_flush
        self.on_start = on_start
        #: Told (one line each) when an engine stops answering and when it answers again.
        self.on_warning = on_warning
        self.stop = threading.Event()
        self.board = LatestValues()
        self.state = WatchState()
        self.ticker = Ticker(config.interval_s, config.duration_s, self.stop)
        self._pending: list[Sample] = []
        #: Samples of the latest tick (read by ``on_tick`` hooks such as live alert rules).
        self.last_samples: list[Sample] = []
        self._history: dict[tuple[str, str], deque[tuple[float, float]]] = {}
        self._memory: list[Sample] = []
        self.exporter: Exporter | None = None
        self.store: Store | None = None
        self._writer: StoreWriter | None = None
        #: Why the store stopped taking writes mid-run (None: it took every batch). The
        #: batches it did not take are kept in ``_unwritten`` for the run directory.
        self.store_error: str | None = None
        self._unwritten: list[Sample] = []

    def latest(self) -> dict[tuple[str, str, str], float]:
        """Newest value per ``(source, metric, labels)`` (what the live table shows)."""
        values, _ = self.board.snapshot()
        return {(src, metric, labels): v for (metric, src, labels), v in values.items()}

    def _record_history(self, samples: list[Sample]) -> None:
        watched = set(WAVEFORM_SERIES.values()) | {ACTIVITY_SERIES}
        horizon = samples[0].t_s - self.config.window_s if samples else 0.0
        for s in samples:
            if s.metric in watched and not s.labels:
                h = self._history.setdefault((s.source, s.metric), deque())
                h.append((s.t_s, s.value))
                while h and h[0][0] < horizon:
                    h.popleft()

    def derived(self, t_s: float) -> list[Sample]:
        """Peak over the window and leak slope (Theil-Sen on <= SLOPE_POINTS) per source."""
        out: list[Sample] = []
        for (source, metric), h in self._history.items():
            if metric == ACTIVITY_SERIES or len(h) < 2:
                continue
            out.append(Sample(t_s, source, PEAK_NAMES[metric], max(v for _, v in h)))
            if metric == "gpu_memory_used_bytes":
                pts = list(h)[:: -(-len(h) // SLOPE_POINTS)]  # ceil: at most SLOPE_POINTS
                slope = theil_sen_slope([p[0] for p in pts], [p[1] for p in pts])
                if not math.isnan(slope):
                    out.append(Sample(t_s, source, "gpu_memory_leak_slope_bytes_per_second", slope))
        return out

    def _flush(self) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        if self._writer is not None:
            self._writer.put(batch)
        else:
            self._memory.extend(batch)

    def _committed(self, rows: int) -> None:
        # Called by the writer thread after each COMMIT.
        self.state.rows_flushed += rows
        self.state.batches += 1
        if self.on_flush is not None:
            self.on_flush(self.state.batches, self.state.rows_flushed)

    def _store_failed(self, line: str) -> None:
        # Called by the writer thread, at once: a watch whose store has stopped must say so.
        self.store_error = line
        if self.on_warning is not None:
            keep = "the run directory" if self.config.out_dir is not None else "memory only"
            self.on_warning(f"{line}; sampling goes on, the samples kept in {keep}.")

    def _identify(self) -> None:
        if self.gpus is not None:
            for i in range(self.gpus.nvml.device_count):
                name, uuid = self.gpus.nvml.identity(i)
                self.board.set_info(f"gpu:{i}", {"uuid": uuid, "name": name})

    def run(self) -> dict[str, Any]:
        """Sample until stopped or ``duration_s`` passes; returns the summary dict."""
        self.state.started_unix_s = time.time()  # reset below when sampling starts
        self._open()
        try:
            self._loop()
        finally:
            summary = self._close()
        return summary

    def _open(self) -> None:
        """Store, exporter, run directory: each refused in one line before any sampling."""
        cfg = self.config
        try:
            if cfg.store_path is not None:
                self.store = Store(cfg.store_path)
                self._writer = StoreWriter(self.store, self._committed, self._store_failed)
                self._writer.start()
            if self.kv_events is not None:
                self.kv_events.open(self.store, cfg.flush_s)
            if cfg.exporter_port is not None:
                self.exporter = Exporter.start(self.board, cfg.exporter_port, cfg.listen)
            if cfg.out_dir is not None:
                fresh_run_dir(cfg.out_dir, force=cfg.force, what="watch run directory")
                make_dir(cfg.out_dir)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.queue.put(None)
            writer.join()
        if self.exporter is not None:
            self.exporter.stop()
        if self.store is not None:
            try:
                self.store.close()
            except Exception:  # a store that failed to write may fail its last checkpoint
                if self.store_error is None:
                    raise

    def _loop(self) -> None:
        cfg = self.config
        self._identify()
        last_flush = last_derive = time.monotonic()
        self.state.started_unix_s = time.time()
        if self.on_start is not None:
            self.on_start(self)
        # Everything built so far (imported modules, parsers, the store) lives as long as
        # the session: moving it out of the collector's reach keeps each cyclic
        # collection to what the ticks allocate (the collector was ~7 % of the loop).
        gc.freeze()
        for _k, _due in self.ticker:
            t = time.time()
            samples: list[Sample] = []
            if self.gpus is not None:
                samples.extend(self.gpus.sample(t))
            news: list[str] = []
            for eng in self.engines:
                was_up, was_cause = eng.up, eng.last_cause
                samples.extend(eng.sample(t))
                line = eng.news(was_up, was_cause)
                if line is not None:
                    news.append(line)
                page = eng.last_page
                if page is not None:
                    self.board.set_info(
                        eng.source, {"kind": page.kind or "", "model": page.model_name or ""}
                    )
            if self.kv_events is not None:
                samples.extend(self.kv_events.sample(t))
            self._record_history(samples)
            now = time.monotonic()
            if now - last_derive >= cfg.derive_every_s:
                samples.extend(self.derived(t))
                last_derive = now
            self.board.update(samples)
            # At once, not at the end: a watch of an engine that is not there must say so
            # while the user can still fix the URL (it goes on trying; the exit code tells
            # too). After the board's update, so the exporter already shows engine_up 0.
            if self.on_warning is not None:
                for line in news:
                    self.on_warning(line)
            self.last_samples = samples
            self._pending.extend(samples)
            self.state.ticks += 1
            self.state.samples += len(samples)
            if now - last_flush >= cfg.flush_s:
                self._flush()
                last_flush = now
            if self.on_tick is not None:
                self.on_tick(self)

    def _close(self) -> dict[str, Any]:
        """Flush, commit, summarise, write the run directory; then release everything.

        Every step runs even when an earlier one failed; the first failure is raised after.
        """
        cfg = self.config
        gc.unfreeze()
        failures: list[KvscopeError] = []
        if self.kv_events is not None:
            self.kv_events_summary = self.kv_events.close()
        self._flush()
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()  # drains the queue: every batch committed or kept unwritten
            self._unwritten = writer.unwritten
            self.store_error = writer.error
        summary = self.summary()
        if cfg.out_dir is not None:
            try:
                self.write_run_dir(cfg.out_dir, summary)
            except (OSError, KvscopeError) as err:
                why = err.one_line() if isinstance(err, KvscopeError) else err.strerror or err
                failures.append(KvscopeError(f"{cfg.out_dir}: cannot write the run ({why})."))
        self._release()
        if failures:
            raise failures[0]
        return summary

    def _all_samples(self) -> list[Sample]:
        if self.store is None:
            return self._memory
        try:
            rows = self.store.query(
                "SELECT t_s, source, metric, labels, value FROM samples "
                "WHERE t_s >= ? AND res_s = 0",
                [self.state.started_unix_s - 1.0],
            )
        except Exception:
            if self.store_error is None:
                raise
            rows = []  # the failed store cannot even be read: what it did not take is kept
        stored = [Sample(r[0], r[1], r[2], math.nan if r[4] is None else r[4], r[3]) for r in rows]
        return stored + self._unwritten

    def waveforms(self) -> dict[str, Waveform]:
        """Waveform of the watched series of every source, over the whole session."""
        series: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
        for s in self._all_samples():
            if s.labels:
                continue
            kind = s.source.partition(":")[0]
            if s.metric == WAVEFORM_SERIES.get(kind) or s.metric == ACTIVITY_SERIES:
                ts, vs = series.setdefault((s.source, s.metric), ([], []))
                ts.append(s.t_s)
                vs.append(s.value)
        out: dict[str, Waveform] = {}
        for (source, metric), (ts, vs) in series.items():
            if metric == ACTIVITY_SERIES:
                continue
            act = series.get((source, ACTIVITY_SERIES))
            out[f"{source}/{metric}"] = analyse(
                ts, vs, act, value_is_bytes=metric.endswith("_bytes")
            )
        return out

    def summary(self) -> dict[str, Any]:
        cfg = self.config
        waves = self.waveforms() if self.state.ticks else {}
        gpu_faults = dict(self.gpus.nvml.faults) if self.gpus is not None else {}
        config = {
            k: (redact_text(str(v)) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()
        }
        config["engines"] = [redact_url(u) for u in cfg.engines]  # never user:password@
        return {
            "kind": "watch",
            "kvscope_version": __version__,
            "config": config,
            "duration_s": time.time() - self.state.started_unix_s,
            "ticks": self.state.ticks,
            "missed_ticks": self.ticker.missed,
            "samples": self.state.samples,
            "store_rows": self.state.rows_flushed,
            "store_error": self.store_error,
            "gpus": self.gpus.nvml.device_count if self.gpus is not None else 0,
            "nvml_faults": gpu_faults,
            "engine_faults": {e.source: e.faults for e in self.engines},
            "engine_errors": {e.source: e.last_error for e in self.engines if e.last_error},
            # Engines that never answered: the watch exits 1 (it got none of what was asked).
            "engines_never_up": [
                e.display_url for e in self.engines if e.ok_scrapes == 0 and self.state.ticks
            ],
            "waveforms": {k: asdict(w) for k, w in waves.items()},
            **({"kv_events": self.kv_events_summary} if self.kv_events_summary else {}),
        }

    def write_run_dir(self, out_dir: Path, summary: dict[str, Any]) -> None:
        write_run_dir(out_dir, self._all_samples(), self.state.started_unix_s, summary)
