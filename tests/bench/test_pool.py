"""The run's connection pool: a request the pool sent down an already-closed connection goes
out again on a fresh one, counted; every other failure stays the request's error.

Against a real aiohttp server on 127.0.0.1 (``bench_helpers``' ``close-reused`` mode) that
answers each connection's first request and hangs up on the next one, as llama.cpp's server
does after every streamed answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pyarrow.parquet as pq
import pytest
from bench_helpers import kvscope, start_odd_server, stop

from kvscope.bench.pool import Attempt, stale_connection

pytestmark = pytest.mark.integration


def test_a_request_on_a_closed_pooled_connection_is_resent_and_counted(tmp_path: Path) -> None:
    proc, url = start_odd_server("close-reused")
    out = tmp_path / "r"
    try:
        # one request at a time: each one after the first finds the previous one's connection
        # in the pool, and the server hangs up on it
        r = kvscope("bench", "--url", url, "--model", "mock", "--prompt-len", "8",
                    "--output-len", "4", "--num-requests", "6", "--arrival", "poisson:rate=20",
                    "--max-concurrency", "1", "--scrape-interval", "0", "--out", str(out),
                    "--json", timeout=60)  # fmt: skip
    finally:
        stop(proc)  # type: ignore[arg-type]
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    s = json.loads(r.stdout)
    assert s["completed"] == 6 and s["errors_by_kind"] == {}, s
    rows = sorted(pq.read_table(out / "requests.parquet").to_pylist(), key=lambda x: x["sent_s"])
    assert [row["resends"] for row in rows] == [0, 1, 1, 1, 1, 1]
    assert [row["output_tokens"] for row in rows] == [4] * 6
    assert s["resends"] == 5


def _reused() -> Attempt:
    a = Attempt()
    a.reused = True
    return a


@pytest.mark.parametrize(
    ("err", "attempt", "answered", "resend"),
    [
        (aiohttp.ServerDisconnectedError(), _reused(), False, True),
        (aiohttp.ClientOSError(None, "Can not write request body"), _reused(), False, True),
        (ConnectionResetError("Cannot write to closing transport"), _reused(), False, True),
        # a fresh connection's failure is the server's
        (aiohttp.ServerDisconnectedError(), Attempt(), False, False),
        # once an answer has begun the server had the request
        (aiohttp.ServerDisconnectedError(), _reused(), True, False),
        (aiohttp.ClientPayloadError("cut"), _reused(), False, False),
        (TimeoutError(), _reused(), False, False),
        (ValueError("bad json"), _reused(), False, False),
    ],
)
def test_only_a_reused_connection_that_failed_before_any_answer_is_resent(
    err: BaseException, attempt: Attempt, answered: bool, resend: bool
) -> None:
    assert stale_connection(err, attempt, answered) is resend
