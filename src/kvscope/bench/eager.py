"""Start a coroutine *now*, up to its first real suspension, then let a task finish it.

An open-loop dispatcher releases request ``i`` at its scheduled instant; with a plain
``create_task`` the request's first step (build it, take a pooled connection, write it to the
socket) runs only on a later turn of the event loop, after whatever else is ready -- on a busy
client that added up to a millisecond at P99 to every request's arrival error. Python 3.12's
eager tasks (``asyncio.Task(..., eager_start=True)``, the machinery behind
``asyncio.eager_task_factory``) run that first step synchronously, as the task. On 3.11 the
same is done here: the task is created, made the current task while the coroutine is driven
by hand to its first wait (so ``asyncio.current_task()`` -- which aiohttp's timeouts cancel --
is the request's own task), and the task then waits on that future and resumes the coroutine
as ``asyncio.Task`` would; cancelling the task cancels the future the coroutine waits on.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from asyncio.tasks import _enter_task, _leave_task  # what 3.12's eager start does, by hand
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def start_eagerly(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """Run ``coro`` until it first suspends, then return the task that finishes it."""
    loop = asyncio.get_running_loop()
    if sys.version_info >= (3, 12):  # pragma: no cover - the CI interpreter is 3.11
        return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
    first: list[tuple[str, Any]] = []
    task = loop.create_task(_finish(coro, first))
    outer = asyncio.current_task(loop)
    if outer is not None:
        _leave_task(loop, outer)
    _enter_task(loop, task)
    try:
        first.append(("wait", coro.send(None)))
    except StopIteration as stop:
        first.append(("return", stop.value))
    except BaseException as err:  # delivered through the task, as a task would
        first.append(("raise", err))
    finally:
        _leave_task(loop, task)
        if outer is not None:
            _enter_task(loop, outer)
    if first[0][0] == "wait":
        # Cancelled before its first turn, the task never enters _finish: reap the coroutine
        # here, so it still sees the cancellation (and runs its cleanup) as in a task.
        task.add_done_callback(lambda t: _reap(coro, first[0][1]) if t.cancelled() else None)
    return task


def _reap(coro: Coroutine[Any, Any, Any], waiting: Any) -> None:
    if inspect.getcoroutinestate(coro) != inspect.CORO_SUSPENDED:
        return
    if waiting is not None:
        waiting.cancel()
    try:
        coro.throw(asyncio.CancelledError())
    except BaseException:  # the coroutine's own cancellation path ran: nothing to add
        return
    coro.close()  # it swallowed the cancellation and waited again: stop it for good


async def _finish(coro: Coroutine[Any, Any, T], first: list[tuple[str, Any]]) -> T:
    kind, waiting = first[0]
    if kind == "return":
        return waiting  # type: ignore[no-any-return]
    if kind == "raise":
        raise waiting
    while True:
        # Wait on the very future the coroutine waits on (no extra future per wait: a stream
        # suspends once per chunk); then resume the coroutine, which reads that future's
        # outcome itself, exactly as Task.__step would resume it.
        try:
            if waiting is None:  # a bare yield (asyncio.sleep(0)): just give the loop a turn
                await asyncio.sleep(0)
            else:
                waiting._asyncio_future_blocking = False  # what Task.__step does on a yield
                await waiting
        except asyncio.CancelledError:
            if waiting is None or not waiting.cancelled():
                # This task was cancelled, not the future (it was done or there was none):
                # the coroutine gets the cancellation instead of its result, as in a task.
                try:
                    waiting = coro.throw(asyncio.CancelledError())
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                continue
        except Exception:  # the future failed: the coroutine raises it when resumed
            pass
        try:
            waiting = coro.send(None)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
