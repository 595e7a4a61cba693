"""Starting the ranks of a measurement and watching them until they finish or fail.

:func:`launch` starts ``world_size`` local processes (``fork`` for gloo, so torch is
imported once; ``spawn`` for NCCL, which must not inherit a CUDA context) that meet at a
``file://`` rendezvous in a fresh temporary folder, so concurrent runs never race for a
port. Each rank writes its position — phase, step, iteration — into a shared array
after every move; the parent reads it every 50 ms. Rank 0 sends each step's timings up
a pipe as soon as the step is measured, so results arrive incrementally.

The run fails fast and names the culprit:

- a rank that exits non-zero (or is killed) stops the run at once; the message names it,
  its exit code or signal and where it was, and all other ranks are killed;
- when no rank moves for ``timeout_s`` seconds, the ranks outside the collective (or
  behind the others) are named as the ones that hung; if all of them sit inside the same
  collective, the collective itself is named. Until every rank has joined the process
  group the allowance is at least ``startup_timeout_s`` (spawned ranks import torch first).

Either way :class:`RankFailure` is raised (CLI exit code 3) within about
``timeout_s + 1`` seconds.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np

from kvscope.errors import KvscopeError

# Phases a rank reports (slot 0 of its row in the shared progress array).
STARTING, RENDEZVOUS, OUTSIDE, BARRIER, COLLECTIVE, GATHER, DONE = range(7)
PHASE_NAMES = (
    "before reaching the rendezvous",
    "at the rendezvous",
    "outside any collective",
    "in the barrier",
    "inside the collective",
    "gathering timings",
    "done",
)
#: Slots per rank in the progress array: phase, step, iteration, tick count.
SLOTS = 4
_POLL_S = 0.05


class TorchMissingError(KvscopeError):
    """torch is not installed: ``kvscope comm`` needs the ``torch`` extra."""

    def __init__(self) -> None:
        super().__init__(
            "kvscope comm needs PyTorch: install the torch extra (pip install 'kvscope[torch]')."
        )


class RankFailure(KvscopeError):
    """A rank died or hung; the run was stopped. ``rank`` is the culprit when known."""

    exit_code = 3

    def __init__(self, message: str, rank: int | None) -> None:
        super().__init__(message)
        self.rank = rank


def require_torch() -> Any:
    """Import ``torch.distributed`` or raise :class:`TorchMissingError`."""
    try:
        import torch.distributed as dist
    except ImportError as err:
        raise TorchMissingError() from err
    return dist


@dataclass(frozen=True)
class Fault:
    """A failure to inject, for testing the supervisor: ``kind`` is ``exit`` or ``hang``.

    Rank ``rank`` exits with ``exit_code`` (or sleeps until killed) just before the
    barrier of the first iteration of step ``step``.
    """

    rank: int
    kind: str
    step: int = 0
    exit_code: int = 17

    @classmethod
    def parse(cls, text: str) -> Fault:
        """``"2:exit"``, ``"1:hang@3"`` (rank, kind, optional step)."""
        try:
            rank_s, rest = text.split(":", 1)
            kind, _, step_s = rest.partition("@")
            fault = cls(int(rank_s), kind.strip(), int(step_s) if step_s else 0)
        except ValueError as err:
            raise KvscopeError(
                f"cannot read fault '{text}'.", "Use RANK:exit or RANK:hang[@STEP]."
            ) from err
        if fault.kind not in ("exit", "hang"):
            raise KvscopeError(f"fault kind must be exit or hang, got '{fault.kind}'.")
        return fault


@dataclass(frozen=True, eq=False)
class Step:
    """One measured point: ``iters`` timed runs of ``op`` after ``warmup`` untimed ones.

    ``tokens[iteration, src, dst]`` (MoE dispatch only) gives uneven all-to-all splits in
    tokens of ``hidden`` elements, one matrix per warm-up and timed iteration.
    """

    op: str
    size_bytes: int
    dtype: str
    warmup: int
    iters: int
    tokens: np.ndarray | None = None
    hidden: int = 0


@dataclass(frozen=True)
class Job:
    """Everything every rank needs to run the measurement."""

    backend: str
    world_size: int
    steps: tuple[Step, ...]
    timeout_s: float
    init_method: str = "env://"
    fault: Fault | None = None
    restrict_to_loopback: bool = True
    #: Until every rank has joined, the stall clock allows at least this long: spawned
    #: ranks import torch first, which on a loaded host takes many seconds.
    startup_timeout_s: float = 120.0


@dataclass
class _Watch:
    """Parent-side bookkeeping while the ranks run."""

    errors: dict[int, str] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    last_snapshot: tuple[int, ...] = ()
    last_change: float = 0.0


StepSink = Callable[[int, np.ndarray, list[int]], None]


def ranks_text(ranks: list[int]) -> str:
    """``[2]`` -> ``"rank 2"``; ``[0, 1, 3]`` -> ``"ranks 0, 1 and 3"``."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return "ranks " + ", ".join(str(r) for r in ranks[:-1]) + f" and {ranks[-1]}"


def _where(job: Job, row: tuple[int, ...]) -> str:
    phase, step, it = row[0], row[1], row[2]
    if step < 0 or step >= len(job.steps):
        return PHASE_NAMES[phase]
    s = job.steps[step]
    warm = it < s.warmup
    it_txt = f"warm-up iteration {it}" if warm else f"iteration {it - s.warmup}"
    return f"{PHASE_NAMES[phase]} at step {step} ({s.op}, {s.size_bytes} B, {it_txt})"


def _stall_message(job: Job, rows: list[tuple[int, ...]]) -> tuple[str, int | None]:
    """Name the rank(s) that hung from where every rank last reported itself."""
    # A rank at the rendezvous, a barrier or inside a collective is waiting for its peers.
    waiting = [
        r for r, row in enumerate(rows) if row[0] in (RENDEZVOUS, BARRIER, COLLECTIVE, GATHER)
    ]
    positions = [(row[1], row[2]) for row in rows]
    behind = [r for r, p in enumerate(positions) if p < max(positions)]
    stuck = [r for r in range(len(rows)) if r not in waiting] if waiting else behind
    if not stuck:
        stuck = behind
    if not stuck:
        cause = (
            "the rendezvous never completed"
            if all(row[0] == RENDEZVOUS for row in rows)
            else "the collective itself hung (a peer, the link or the backend)"
        )
        return f"all {len(rows)} ranks stopped {_where(job, rows[0])}: {cause}", None
    others = [r for r in range(len(rows)) if r not in stuck]
    text = f"{ranks_text(stuck)} stopped making progress {_where(job, rows[stuck[0]])}"
    if others:
        text += f" while {ranks_text(others)} waited {PHASE_NAMES[rows[others[0]][0]]}"
    return text, stuck[0]


def launch(job: Job, on_step: StepSink, start_method: str | None = None) -> None:
    """Run ``job`` on local processes; call ``on_step`` as each step's timings arrive.

    ``on_step(step_index, times_s[rank, iteration], wrong_ranks)``. Raises
    :class:`RankFailure` when a rank dies or hangs. ``start_method`` overrides the
    choice of ``fork`` (gloo) or ``spawn`` (NCCL).
    """
    require_torch()
    from kvscope.comm import worker

    method = start_method or (
        "fork" if job.backend == "gloo" and "fork" in mp.get_all_start_methods() else "spawn"
    )
    ctx: Any = mp.get_context(method)
    n = job.world_size
    progress = ctx.Array("q", n * SLOTS, lock=False)
    for r in range(n):
        progress[r * SLOTS + 1] = -1
    with tempfile.TemporaryDirectory(prefix="kvscope-comm-") as tmp:
        job = _with_rendezvous(job, f"file://{os.path.join(tmp, 'rendezvous')}")
        procs: list[Any] = []
        readers: list[Connection] = []
        for rank in range(n):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(
                target=worker.rank_entry,
                args=(rank, job, progress, send),
                name=f"kvscope-comm-rank{rank}",
                daemon=True,
            )
            p.start()
            send.close()
            procs.append(p)
            readers.append(recv)
        try:
            _supervise(job, procs, readers, progress, on_step)
        finally:
            _stop_all(procs)
            for conn in readers:
                conn.close()


def _with_rendezvous(job: Job, init_method: str) -> Job:
    return replace(job, init_method=init_method)


def _supervise(
    job: Job,
    procs: list[Any],
    readers: list[Connection],
    progress: Any,
    on_step: StepSink,
) -> None:
    n = job.world_size
    watch = _Watch(last_change=time.monotonic())
    open_readers = list(readers)
    while True:
        sentinels = [p.sentinel for p in procs if p.exitcode is None]
        ready = wait([*open_readers, *sentinels], timeout=_POLL_S)
        for obj in ready:
            if isinstance(obj, Connection):
                try:
                    msg = obj.recv()
                except (EOFError, OSError):
                    open_readers.remove(obj)
                    continue
                _handle(msg, watch, on_step)
        failed = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
        if failed:
            _drain(open_readers, watch, on_step)
            raise _death(job, procs, failed, watch, _rows(progress, n))
        if all(p.exitcode == 0 for p in procs):
            _drain(open_readers, watch, on_step)
            missing = [r for r in range(n) if r not in watch.done]
            if missing:
                raise RankFailure(
                    f"rank {missing[0]} exited without finishing the measurement.", missing[0]
                )
            return
        snapshot = tuple(progress[:])
        now = time.monotonic()
        if snapshot != watch.last_snapshot:
            watch.last_snapshot, watch.last_change = snapshot, now
        else:
            rows = _rows(progress, n)
            starting = any(row[0] <= RENDEZVOUS for row in rows)
            limit = max(job.timeout_s, job.startup_timeout_s) if starting else job.timeout_s
            if now - watch.last_change > limit:
                text, culprit = _stall_message(job, rows)
                raise RankFailure(
                    f"{text}; no rank moved for {limit:g} s, so all ranks were stopped.",
                    culprit,
                )


def _rows(progress: Any, n: int) -> list[tuple[int, ...]]:
    flat = list(progress[:])
    return [tuple(flat[r * SLOTS : (r + 1) * SLOTS]) for r in range(n)]


def _handle(msg: tuple[Any, ...], watch: _Watch, on_step: StepSink) -> None:
    kind = msg[0]
    if kind == "step":
        on_step(int(msg[1]), np.asarray(msg[2], dtype=np.float64), list(msg[3]))
    elif kind == "error":
        watch.errors.setdefault(int(msg[1]), str(msg[2]))
    elif kind == "done":
        watch.done.add(int(msg[1]))


def _drain(readers: list[Connection], watch: _Watch, on_step: StepSink) -> None:
    for conn in readers:
        with contextlib.suppress(EOFError, OSError):
            while conn.poll(0):
                _handle(conn.recv(), watch, on_step)


def _death(
    job: Job, procs: list[Any], failed: list[int], watch: _Watch, rows: list[tuple[int, ...]]
) -> RankFailure:
    # A rank that died without reporting an error (killed, os._exit) is the cause; peers
    # that then lost their connection report errors of their own.
    silent = [r for r in failed if r not in watch.errors]
    culprit = silent[0] if silent else min(failed, key=lambda r: list(watch.errors).index(r))
    code = procs[culprit].exitcode
    how = (
        f"was killed by {signal.Signals(-code).name}"
        if code is not None and code < 0
        else f"exited with code {code}"
    )
    text = f"rank {culprit} {how} {_where(job, rows[culprit])}"
    if culprit in watch.errors:
        text += f": {watch.errors[culprit]}"
    others = [r for r in range(job.world_size) if r != culprit]
    if others:
        text += f"; stopped {ranks_text(others)}."
    return RankFailure(text, culprit)


def _stop_all(procs: list[Any]) -> None:
    for p in procs:
        if p.exitcode is None:
            p.kill()
    for p in procs:
        p.join(timeout=5)
