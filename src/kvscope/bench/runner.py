"""One bench run: dispatch a workload against a server, record every request as it ends.

Owns the load shapes and the run's lifecycle (run directory, signals, draining):

* **Open loop** (every arrival process and trace replay): request ``i`` is released at
  ``t0 + arrival_s[i]`` on an absolute schedule, so lateness never accumulates (the bug of
  relative sleeps, vLLM issue #21104). The dispatcher sleeps until ``SPIN_S`` before the
  target — event-loop timers have about 1 ms resolution (libuv's are whole milliseconds;
  AIPerf PR #1185 measured the same quantisation) — then yields to the loop until the target
  passes, reading responses meanwhile. ``dispatch_lag_s`` = send − target is recorded per
  request: the client's own lateness (pacing error plus the time its task waited for the
  loop), the figure that shows when the client, not the server, limits a run.
* **Concurrency cap over a rate** (``max_concurrency``): when the cap holds a request back,
  the rest of the schedule slides by the same delay instead of being released in a burst when
  slots free together (the burst problem of vLLM PR #45502); the slide is ``cap_delay_s``.
* **Closed loop** (``--arrival concurrency:n=N[,think=S]``): N workers, each sends its next
  request when its previous one ends (plus think time).

Rows are appended to ``requests.parquet`` (via a crash-safe stream) every ``FLUSH_S`` and at
the end; Ctrl-C (SIGINT) or SIGTERM cancels what is in flight, keeps those requests as
``incomplete``/``cancelled`` and still writes the summary. After the last release the run
waits at most ``drain_timeout_s`` for what is in flight (a stalled stream ends sooner, at the
client's stream timeout); whatever is still running then is cut and kept as a ``timeout``
row, so every released request is a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import operator
import signal
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvscope.bench.client import ClientConfig, ErrorKind, Trace, stream_request
from kvscope.bench.config import LoadConfig as LoadConfig
from kvscope.bench.eager import start_eagerly
from kvscope.bench.pool import make_session
from kvscope.bench.records import BENCH_REQUEST_SCHEMA, CHUNK_SCHEMA, request_row
from kvscope.bench.server_probe import SERVER_SCHEMA, ServerProbe, metrics_url
from kvscope.redact import basic_auth
from kvscope.results import RunDir, Status

#: Wake this long before a release and yield to the loop until it is due (s). A wider window
#: (tried: adaptive up to 10 ms) spends a core spinning and, on a shared 2-core machine, got
#: the process preempted more often: P99 lateness went up, not down.
SPIN_S = 0.002
#: How often completed rows are appended to the run directory (s).
FLUSH_S = 0.2
#: A flush (Arrow conversion and a Parquet write) holds the event loop for 2-4 ms, up to 8 ms
#: on this project's VM (measured over a 60 s trace replay): it waits for a gap of at least
#: this long before the next scheduled release, so it does not make that release late...
FLUSH_QUIET_S = 0.008
#: ...letting at most this many releases go first: a dense schedule (hundreds of requests per
#: second) has no such gap, and then the flush goes ahead as before rather than growing.
FLUSH_DEFER_RELEASES = 3
#: ...and never waiting longer than this.
FLUSH_DEFER_S = 0.3


@dataclass(frozen=True)
class Prepared:
    """The request stream ready to send: schedule (s), ids, bodies and target lengths."""

    arrival_s: Sequence[float]
    request_ids: Sequence[str]
    bodies: Sequence[bytes]
    prompt_tokens: Sequence[int]
    output_tokens: Sequence[int]

    def __len__(self) -> int:
        return len(self.bodies)


@dataclass
class RunState:
    """What the run collected (kept in memory for the summary; rows also go to disk)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    itl_gaps: array[float] = field(default_factory=lambda: array("d"))
    interrupted: bool = False
    wall_s: float = 0.0
    probe: dict[str, Any] | None = None
    unfinished: int = 0
    released: int = 0


class BenchRun:
    """Run one prepared stream against one server, writing into ``run_dir``."""

    def __init__(
        self,
        client: ClientConfig,
        load: LoadConfig,
        prepared: Prepared,
        run_dir: RunDir,
        progress: Callable[[Mapping[str, float]], None] | None = None,
    ) -> None:
        self.client = client
        self.load = load
        self.prep = prepared
        self.run_dir = run_dir
        self.progress = progress
        self.state = RunState()
        self._buf: list[dict[str, Any]] = []
        self._chunk_buf: list[dict[str, Any]] = []
        self._server_buf: list[dict[str, Any]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._sem: asyncio.Semaphore | None = None
        self._stop = asyncio.Event()
        self._sent = 0
        self._done = 0
        self._errors = 0
        self._next = 0
        self.t0 = 0.0
        self._slide: dict[int, float] = {}  # index -> how far the cap slid its schedule (s)
        self._live: dict[int, Trace] = {}  # index -> trace of a request in flight
        self._dispatcher: asyncio.Task[None] | None = None
        self._next_due = math.inf  # perf_counter time of the next open-loop release
        self._session: Any = None
        self._window = self._measure_window()

    def _measure_window(self) -> tuple[float, float]:
        arr = self.prep.arrival_s
        if not len(arr) or self.load.closed_loop:
            return (self.load.warmup_s, math.inf)
        return (arr[0] + self.load.warmup_s, arr[-1] - self.load.cooldown_s)

    # ------------------------------------------------------------------ per request
    def _phase(self, t: float) -> str:
        lo, hi = self._window
        if t < lo:
            return "warmup"
        return "cooldown" if t > hi else "measure"

    def _complete(self, tr: Trace) -> None:
        self._done += 1
        self._live.pop(tr.index, None)
        cap_delay = self._slide.pop(tr.index, math.nan)
        phase = self._phase(tr.scheduled_s)
        row, status = request_row(tr, cap_delay, phase)
        if status is Status.ERROR:
            self._errors += 1
        self._buf.append(row)
        self.state.rows.append(row)
        ct = tr.chunk_times
        self._chunk_buf.append({"request_id": tr.request_id, "chunk_times_s": ct})
        if status is Status.OK and phase == "measure" and len(ct) > 1:
            # in C, not one Python step per gap: a long answer ends in one callback
            self.state.itl_gaps.extend(map(operator.sub, ct[1:], ct[:-1]))

    async def _one(self, tr: Trace, body: bytes, headers: dict[str, str]) -> None:
        try:
            await stream_request(self._session, self.client, headers, body, tr, self.t0)
        finally:
            if self._sem is not None:
                self._sem.release()
            self._complete(tr)

    def _trace(self, i: int, scheduled: float) -> Trace:
        tr = Trace(
            index=i,
            request_id=self.prep.request_ids[i],
            scheduled_s=scheduled,
            target_prompt_tokens=self.prep.prompt_tokens[i],
            target_output_tokens=self.prep.output_tokens[i],
        )
        self._live[i] = tr
        return tr

    # ------------------------------------------------------------------ load shapes
    async def _dispatch_open(self) -> None:
        clock = time.perf_counter
        sleep = asyncio.sleep
        t0 = self.t0
        sched = self.prep.arrival_s
        bodies = self.prep.bodies
        headers = self.client.headers()
        sem = self._sem
        shift = 0.0
        for i in range(len(bodies)):
            if self._stop.is_set():
                break
            target = t0 + sched[i] + shift
            self._next_due = target
            d = target - clock()
            if d > SPIN_S:
                await sleep(d - SPIN_S)
                d = target - clock()
            while d > 0:
                await sleep(0)
                d = target - clock()
            if sem is not None:
                if sem.locked():
                    late = clock() - target  # pacing lateness is not the cap's doing
                    await sem.acquire()
                    shift = max(shift, clock() - (t0 + sched[i]) - late)
                else:
                    await sem.acquire()
            tr = self._trace(i, sched[i])
            tr.released_s = clock() - t0
            self._slide[i] = shift
            self._sent += 1
            # Eager: the request is built and written now, not on a later turn of the loop.
            task = start_eagerly(self._one(tr, bodies[i], headers))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._next_due = math.inf

    async def _dispatch_closed(self) -> None:
        n = self.load.closed_loop or 1
        headers = self.client.headers()
        workers = [asyncio.create_task(self._worker(headers)) for _ in range(n)]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()

    async def _worker(self, headers: dict[str, str]) -> None:
        clock = time.perf_counter
        until = math.inf if self.load.duration_s is None else self.load.duration_s
        while not self._stop.is_set() and self._next < len(self.prep):
            if clock() - self.t0 >= until:
                break  # --duration is over: no new request; the one in flight has finished
            i = self._next
            self._next += 1
            now = clock() - self.t0
            tr = self._trace(i, now)
            tr.released_s = now
            self._slide[i] = 0.0
            self._sent += 1
            await self._one(tr, self.prep.bodies[i], headers)
            if self.load.think_s > 0:
                await asyncio.sleep(self.load.think_s)

    # ------------------------------------------------------------------ lifecycle
    def interrupt(self) -> None:
        """Stop dispatching and cancel what is in flight (Ctrl-C, SIGTERM)."""
        if not self._stop.is_set():
            self.state.interrupted = True
            self._stop.set()
            for t in list(self._tasks):
                t.cancel()
            if self._dispatcher is not None:
                self._dispatcher.cancel()

    def _flush(self, req_w: Any, chunk_w: Any, srv_w: Any) -> None:
        if self._buf:
            req_w.append_rows(self._buf)
            self._buf = []
        if self._chunk_buf:
            chunk_w.append_rows(self._chunk_buf)
            self._chunk_buf = []
        if srv_w is not None and self._server_buf:
            rows = self._server_buf[:]  # the probe holds this list: empty it in place
            self._server_buf.clear()
            srv_w.append_rows(rows)

    async def _housekeeping(self, req_w: Any, chunk_w: Any, srv_w: Any) -> None:
        last_progress = 0.0
        while True:
            await asyncio.sleep(FLUSH_S)
            await self._quiet_moment()
            self._flush(req_w, chunk_w, srv_w)
            now = time.perf_counter()
            if self.progress is not None and now - last_progress >= 0.5:
                last_progress = now
                self.progress(self.counters())

    async def _quiet_moment(self) -> None:
        """Wait until the next release is FLUSH_QUIET_S away (a few releases at most).

        A release already overdue by more than that is held back by something else (the
        concurrency cap): flushing then delays nothing that is not waiting anyway.
        """
        clock = time.perf_counter
        give_up = clock() + FLUSH_DEFER_S
        for _ in range(FLUSH_DEFER_RELEASES):
            gap = self._next_due - clock()
            if gap >= FLUSH_QUIET_S or gap < -FLUSH_QUIET_S or clock() >= give_up:
                return
            await asyncio.sleep(max(gap, 0.0) + 0.0005)  # let that release go out first

    def counters(self) -> dict[str, float]:
        return {
            "total": float(len(self.prep)),
            "sent": float(self._sent),
            "done": float(self._done),
            "errors": float(self._errors),
            "in_flight": float(self._sent - self._done),
            "elapsed_s": time.perf_counter() - self.t0 if self.t0 else 0.0,
        }

    async def main(self) -> RunState:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            # only the main thread may install handlers; elsewhere the caller interrupts
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.interrupt)
        if self.load.max_concurrency:
            self._sem = asyncio.Semaphore(self.load.max_concurrency)
        req_w = self.run_dir.table("requests", BENCH_REQUEST_SCHEMA)
        chunk_w = self.run_dir.table("chunks", CHUNK_SCHEMA)
        srv_w = self.run_dir.table("server", SERVER_SCHEMA) if self.load.scrape_interval_s else None
        self._session = make_session(self.client)
        # As vLLM's benchmark does: move start-up objects out of the collector's reach so a
        # full collection cannot pause the dispatcher mid-run.
        gc.collect()
        gc.freeze()
        probe: ServerProbe | None = None
        probe_stop = asyncio.Event()
        background: list[asyncio.Task[None]] = []
        housekeeping: asyncio.Task[None] | None = None
        try:
            self.t0 = time.perf_counter()
            if self.load.scrape_interval_s:
                auth = self.client.headers().get("Authorization")
                probe = ServerProbe(
                    self._session,
                    metrics_url(basic_auth(self.client.base_url)[0]),
                    self.load.scrape_interval_s,
                    self.t0,
                    self._server_buf.append,
                    headers={"Authorization": auth} if auth else None,
                )
                background.append(asyncio.create_task(probe.run(probe_stop)))
            housekeeping = asyncio.create_task(self._housekeeping(req_w, chunk_w, srv_w))
            background.append(housekeeping)
            dispatch = self._dispatch_closed() if self.load.closed_loop else self._dispatch_open()
            self._dispatcher = asyncio.create_task(dispatch)
            await asyncio.wait({self._dispatcher})
            if not self._dispatcher.cancelled():
                err = self._dispatcher.exception()
                if err is not None:
                    raise err
            if self._tasks and not self._stop.is_set():
                await asyncio.wait(set(self._tasks), timeout=self.load.drain_timeout_s)
            pending = set(self._tasks)
            self.state.unfinished = len(pending)
            if pending and not self._stop.is_set():
                # the run's own deadline ended these, not the user: each stays a row, a timeout
                for tr in self._live.values():
                    tr.fail(
                        ErrorKind.TIMEOUT,
                        f"still running {self.load.drain_timeout_s:g} s after the last release",
                    )
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5.0)
            self.state.wall_s = time.perf_counter() - self.t0
            self.state.released = self._sent
        finally:
            probe_stop.set()  # the probe finishes its scrape and stops by itself
            if housekeeping is not None:
                housekeeping.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await self._session.close()
            gc.unfreeze()
            self._flush(req_w, chunk_w, srv_w)
            req_w.close()
            chunk_w.close()
            if srv_w is not None:
                srv_w.close()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(sig)
        self.state.probe = probe.summary() if probe is not None else None
        return self.state


def run_loop(coro_factory: Callable[[], Any]) -> Any:
    """Run a coroutine on uvloop (a dependency except on Windows; tighter pacing), else asyncio."""
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro_factory())


def run_prepared(
    client: ClientConfig,
    load: LoadConfig,
    prepared: Prepared,
    out: Path,
    progress: Callable[[Mapping[str, float]], None] | None = None,
    *,
    force: bool = False,
) -> tuple[RunDir, RunState]:
    """Run ``prepared`` and return the run directory and what was collected.

    ``out`` must be absent or empty unless ``force`` (an earlier run is never overwritten).
    """
    run_dir = RunDir(out, "bench", force=force)
    run = BenchRun(client, load, prepared, run_dir, progress)
    state: RunState = run_loop(run.main)
    return run_dir, state
