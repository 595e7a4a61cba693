"""A bench's ``/metrics`` probe says at once when the server's figures go missing.

Real loopback servers (``tests/fault_servers.py``): a refused port, a port that accepts and
never answers, ``/metrics`` answering 404 or 500, a 200 page of no engine, and a vLLM page.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from fault_servers import FaultyHttp, SilentServer, refused_port
from kvscope.bench.server_probe import ServerProbe


async def _scrape(url: str, n: int, interval_s: float = 0.05) -> tuple[list[str], ServerProbe]:
    said: list[str] = []
    rows: list[dict[str, object]] = []
    async with aiohttp.ClientSession() as session:
        probe = ServerProbe(
            session, url, interval_s, time.perf_counter(), rows.append, warn=said.append
        )
        for _ in range(n):
            await probe.scrape_once()
    assert len(rows) == n
    return said, probe


@pytest.mark.integration
def test_refused_port_is_said_once_per_outage() -> None:
    said, probe = asyncio.run(_scrape(f"http://127.0.0.1:{refused_port()}/metrics", 4))
    assert len(said) == 1, said
    assert "connection refused" in said[0] and "will be missing" in said[0]
    assert probe.failures == 4


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["404", "500"])
def test_http_errors_name_their_status(mode: str) -> None:
    srv = FaultyHttp(mode)
    try:
        said, _ = asyncio.run(_scrape(f"{srv.url}/metrics", 3))
    finally:
        srv.close()
    assert said == [said[0]] and f"HTTP {mode}" in said[0]


@pytest.mark.integration
def test_silent_port_times_out_and_says_so() -> None:
    srv = SilentServer()
    try:
        # interval 0.25 s -> a 1 s scrape timeout (the probe's floor)
        start = time.perf_counter()
        said, _ = asyncio.run(_scrape(f"http://127.0.0.1:{srv.port}/metrics", 1, 0.25))
        took = time.perf_counter() - start
    finally:
        srv.close()
    assert len(said) == 1 and "timed out" in said[0]
    assert took < 2.5


@pytest.mark.integration
def test_a_page_of_no_engine_is_said_and_a_recovery_too() -> None:
    srv = FaultyHttp("other")
    try:
        said, probe = asyncio.run(_scrape(f"{srv.url}/metrics", 2))
        assert len(said) == 1 and "no vLLM, SGLang or llama.cpp series" in said[0]
        assert probe.failures == 0

        async def outage_then_back() -> list[str]:
            out: list[str] = []
            async with aiohttp.ClientSession() as session:
                p = ServerProbe(
                    session,
                    f"{srv.url}/metrics",
                    0.05,
                    time.perf_counter(),
                    lambda _: None,
                    warn=out.append,
                )
                srv.mode = "500"
                await p.scrape_once()
                await p.scrape_once()
                srv.mode = "ok"
                await p.scrape_once()
                await p.scrape_once()
            return out

        again = asyncio.run(outage_then_back())
    finally:
        srv.close()
    assert len(again) == 2, again
    assert "HTTP 500" in again[0] and again[1].endswith("answers again")


@pytest.mark.integration
def test_a_vllm_page_says_nothing() -> None:
    srv = FaultyHttp("ok")
    try:
        said, probe = asyncio.run(_scrape(f"{srv.url}/metrics", 3))
    finally:
        srv.close()
    assert said == [] and probe.failures == 0 and probe.seen
