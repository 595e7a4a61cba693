"""The run's housekeeping yields to the release schedule (the rest of the runner is covered
end to end in test_run.py, test_cli_bench.py and test_llama_server.py)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from kvscope.bench.runner import FLUSH_DEFER_RELEASES, BenchRun


@pytest.mark.parametrize(
    ("due_in_s", "min_wait_s", "max_wait_s"),
    [
        (0.050, 0.0, 0.004),  # the next release is far: flush at once
        (0.004, 0.004, 0.050),  # it is close: wait until it has gone out
        (-0.050, 0.0, 0.004),  # long overdue (held by the cap): flushing delays nothing
    ],
)
def test_flushes_wait_for_a_gap_in_the_schedule(
    due_in_s: float, min_wait_s: float, max_wait_s: float
) -> None:
    async def wait() -> float:
        run = SimpleNamespace(_next_due=time.perf_counter() + due_in_s)
        start = time.perf_counter()
        await BenchRun._quiet_moment(run)  # type: ignore[arg-type]
        return time.perf_counter() - start

    waited = asyncio.run(wait())
    assert min_wait_s <= waited <= max_wait_s + 0.02  # + scheduling slack on a busy machine


def test_a_dense_schedule_still_flushes_after_a_few_releases() -> None:
    async def wait() -> float:
        run = SimpleNamespace(_next_due=time.perf_counter() + 0.002)
        start = time.perf_counter()

        async def always_a_release_in_2_ms() -> None:
            while True:
                run._next_due = time.perf_counter() + 0.002
                await asyncio.sleep(0.001)

        keeper = asyncio.create_task(always_a_release_in_2_ms())
        await BenchRun._quiet_moment(run)  # type: ignore[arg-type]
        keeper.cancel()
        return time.perf_counter() - start

    # Never a quiet gap: it lets FLUSH_DEFER_RELEASES releases (~2.5 ms each) go, then flushes.
    assert 0.005 <= asyncio.run(wait()) <= FLUSH_DEFER_RELEASES * 0.0025 + 0.02
