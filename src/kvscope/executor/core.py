"""Run many independent points on one machine or a Ray cluster, saving each as it finishes.

A job is a top-level function ``fn(payload, shared) -> PointResult`` and a list of
:class:`PointTask`; ``shared`` (the workload) is sent once: to each pool worker when it starts
(the pool's initializer), or into Ray's object store once (``ray.put``), every task getting
its reference. Tasks already saved in the :class:`~kvscope.executor.store.PointStore` are not
run again. At most ``2 x workers`` tasks are in flight, so a deadline (``--max-time``) stops
new work promptly and a Ctrl-C loses only the points being computed.

Backends: ``serial`` (in this process; ``--workers 1``), ``local`` (a process pool of
``--workers`` processes, started by a fork server so no thread of this process is copied) and
``ray`` (``ray.init(address=...)`` of a running cluster: ``--ray auto`` or ``--ray HOST:PORT``;
a worker killed mid-task is retried by Ray, ``max_retries`` below).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Literal

from kvscope.errors import KvscopeError
from kvscope.executor.store import PointResult, PointStore
from kvscope.validate import count

#: Most worker processes ``--workers`` may ask for (a bound for typos).
MAX_WORKERS = 1024
PointFn = Callable[[Any, Any], PointResult]


@dataclass(frozen=True)
class PointTask:
    """One point to compute: ``key`` names its folder in the store, ``payload`` is the
    (picklable) argument of the job's function, ``label`` what progress lines show."""

    key: str
    payload: Any
    label: str = ""


@dataclass(frozen=True)
class Backend:
    """Where points run: ``serial``, ``local`` (``workers`` processes) or ``ray``
    (``address``: ``auto`` or ``HOST:PORT`` of a running cluster)."""

    kind: Literal["serial", "local", "ray"] = "local"
    workers: int = 1
    address: str | None = None

    def describe(self) -> str:
        if self.kind == "ray":
            return f"Ray cluster at {self.address}"
        if self.kind == "serial":
            return "this process"
        return f"{self.workers} local worker processes"


def parse_backend(ray: str | None, workers: int | None) -> Backend:
    """``--ray`` and ``--workers`` to a backend (``--workers`` defaults to the CPU count)."""
    if ray is not None:
        address = ray.strip()
        if not address:
            raise KvscopeError("--ray needs 'auto' or the address HOST:PORT of a Ray cluster.")
        return Backend("ray", workers or 0, address)
    if workers is None:
        n = min(os.cpu_count() or 1, MAX_WORKERS)
    else:
        n = count(workers, "--workers", low=1, high=MAX_WORKERS)
    return Backend("serial" if n == 1 else "local", n)


# ---------------------------------------------------------------------------- the pool
_SHARED: Any = None


def _init_worker(shared: Any) -> None:
    global _SHARED
    _SHARED = shared


def _pool_call(fn: PointFn, payload: Any) -> PointResult:
    return fn(payload, _SHARED)


class _Pool:
    def __init__(self, workers: int, shared: Any) -> None:
        import multiprocessing as mp

        self.capacity = workers
        self._pool = ProcessPoolExecutor(
            workers,
            mp_context=mp.get_context("forkserver"),
            initializer=_init_worker,
            initargs=(shared,),
        )

    def submit(self, fn: PointFn, payload: Any) -> Future[PointResult]:
        return self._pool.submit(_pool_call, fn, payload)

    def wait(self, handles: list[Any]) -> list[tuple[Any, PointResult]]:
        done, _ = wait(handles, return_when=FIRST_COMPLETED)
        return [(h, h.result()) for h in handles if h in done]

    def close(self, cancel: bool = False) -> None:
        self._pool.shutdown(wait=not cancel, cancel_futures=cancel)


class _Serial:
    capacity = 1

    def __init__(self, shared: Any) -> None:
        self.shared = shared

    def submit(self, fn: PointFn, payload: Any) -> tuple[PointFn, Any]:
        return (fn, payload)

    def wait(self, handles: list[Any]) -> list[tuple[Any, PointResult]]:
        fn, payload = handles[0]
        return [(handles[0], fn(payload, self.shared))]

    def close(self, cancel: bool = False) -> None:
        pass


def _runner(backend: Backend, shared: Any) -> Any:
    if backend.kind == "ray":
        from kvscope.executor.ray_backend import RayRunner

        return RayRunner(backend.address or "auto", shared)
    if backend.kind == "serial":
        return _Serial(shared)
    return _Pool(backend.workers, shared)


def run_points(
    fn: PointFn,
    tasks: Sequence[PointTask],
    shared: Any,
    store: PointStore,
    backend: Backend,
    *,
    on_done: Callable[[PointTask, dict[str, Any], bool], None] | None = None,
    deadline: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Compute every task not already in ``store``; return ``{key: figures}`` for all that
    finished (saved ones included). ``on_done(task, figures, resumed)`` is called in this
    process as each point is saved (resumed ones first); ``deadline`` (``time.monotonic()``)
    stops starting new tasks once passed."""
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise ValueError("point keys must be unique")
    out: dict[str, dict[str, Any]] = {}
    todo: list[PointTask] = []
    for task in tasks:
        saved = store.load(task.key)
        if saved is None:
            todo.append(task)
            continue
        out[task.key] = saved
        if on_done:
            on_done(task, saved, True)
    if not todo:
        return out
    runner = _runner(backend, shared)
    in_flight: dict[Any, PointTask] = {}
    queue = list(reversed(todo))
    cancelled = True
    try:
        while queue or in_flight:
            while queue and len(in_flight) < 2 * runner.capacity:
                if deadline is not None and time.monotonic() >= deadline:
                    queue.clear()
                    break
                task = queue.pop()
                in_flight[runner.submit(fn, task.payload)] = task
            if not in_flight:
                break
            for handle, result in runner.wait(list(in_flight)):
                task = in_flight.pop(handle)
                figures = store.save(task.key, result)
                out[task.key] = figures
                if on_done:
                    on_done(task, figures, False)
        cancelled = False
    finally:
        runner.close(cancel=cancelled)
    return out
