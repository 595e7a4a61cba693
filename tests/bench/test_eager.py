"""Eager start: the first step runs at once and as the task; the rest behaves like a task."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from kvscope.bench.eager import start_eagerly

LOOPS = ["asyncio"] + (["uvloop"] if importlib.util.find_spec("uvloop") else [])


@pytest.fixture(params=LOOPS)
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, None]], None]:
    """Run a coroutine on the stock loop and, where installed, on uvloop (what bench uses)."""
    factory = None
    if request.param == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop

    def go(coro: Coroutine[Any, Any, None]) -> None:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(coro)

    return go


def test_first_step_runs_now_and_as_its_own_task(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    seen: list[object] = []

    async def body(gate: asyncio.Future[int]) -> int:
        seen.append(asyncio.current_task())
        return await gate + 1

    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[int] = loop.create_future()
        outer = asyncio.current_task()
        task = start_eagerly(body(gate))
        # Ran before any turn of the loop, with the request's task as the current task.
        assert seen == [task] and task is not outer
        assert asyncio.current_task() is outer
        loop.call_later(0.01, gate.set_result, 41)
        assert await task == 42

    run(main())


@pytest.mark.parametrize("first_turn", [True, False], ids=["waiting", "before-first-turn"])
def test_cancelling_reaches_the_coroutine_at_its_wait(
    run: Callable[[Coroutine[Any, Any, None]], None], first_turn: bool
) -> None:
    # Cancelled while it waits, or before the loop ever gave its task a turn: either way the
    # coroutine sees CancelledError at its wait and runs its cleanup, as in a plain task.
    log: list[str] = []

    async def body(gate: asyncio.Future[None]) -> None:
        try:
            await gate
        except asyncio.CancelledError:
            log.append("cancelled inside")
            raise
        finally:
            log.append("cleanup")

    async def main() -> None:
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = start_eagerly(body(gate))
        if first_turn:
            await asyncio.sleep(0.01)  # the task is waiting on the gate
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert gate.cancelled()

    run(main())
    assert log == ["cancelled inside", "cleanup"]


def test_results_and_errors_of_a_coroutine_that_never_waits(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    async def quick() -> str:
        return "done"

    async def broken() -> None:
        raise ValueError("bad request")

    async def main() -> None:
        assert await start_eagerly(quick()) == "done"
        with pytest.raises(ValueError, match="bad request"):
            await start_eagerly(broken())

    run(main())


def test_timeouts_inside_the_coroutine_cancel_the_right_task(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    # asyncio.timeout (like aiohttp's timers) cancels asyncio.current_task(): it must be the
    # request's task, never the dispatcher that started it.
    async def slow() -> str:
        try:
            async with asyncio.timeout(0.02):
                await asyncio.sleep(10)
        except TimeoutError:
            return "timed out"
        return "not reached"

    async def main() -> None:
        task = start_eagerly(slow())
        assert await task == "timed out"
        await asyncio.sleep(0.05)  # the dispatcher (this coroutine) is not cancelled

    run(main())


def test_a_failed_wait_raises_inside_the_coroutine_after_its_first_step(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    # Later waits (a stream's next chunk) go through the task too: an error set on the
    # future is raised at the coroutine's await, where it can be handled.
    async def body(first: asyncio.Future[int], second: asyncio.Future[int]) -> str:
        n = await first
        try:
            await second
        except ConnectionResetError as err:
            return f"{n}: {err}"
        return "not reached"

    async def main() -> None:
        loop = asyncio.get_running_loop()
        first: asyncio.Future[int] = loop.create_future()
        second: asyncio.Future[int] = loop.create_future()
        task = start_eagerly(body(first, second))
        loop.call_later(0.005, first.set_result, 7)
        loop.call_later(0.01, second.set_exception, ConnectionResetError("peer gone"))
        assert await task == "7: peer gone"

    run(main())


def test_cancel_after_the_wait_completed_still_cancels_the_coroutine(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    # The future the task waits on is already done when cancel() comes: as with a plain task,
    # the coroutine gets CancelledError at that await instead of the result.
    log: list[str] = []

    async def body(gate: asyncio.Future[int]) -> None:
        await asyncio.sleep(0)  # past the eager first step
        try:
            await gate
            log.append("resumed normally")
        except asyncio.CancelledError:
            log.append("cancelled inside")
            raise

    async def main() -> None:
        gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        task = start_eagerly(body(gate))
        await asyncio.sleep(0.01)  # the task now waits on the gate
        gate.set_result(1)  # done, but the task has not had its turn yet...
        task.cancel()  # ...when it is cancelled
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not gate.cancelled()

    run(main())
    assert log == ["cancelled inside"]
