"""A finished request's row: status by error class, dispatch lag net of the cap's slide,
prompt tokens from the server's usage when it sent one, and the file's schema."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from kvscope.bench.client import ErrorKind, Trace
from kvscope.bench.records import BENCH_REQUEST_SCHEMA, request_row
from kvscope.results import Status


def _trace(kind: ErrorKind | None = None, usage_prompt: int = -1) -> Trace:
    tr = Trace(7, "r7", scheduled_s=10.0, target_prompt_tokens=100, target_output_tokens=3)
    tr.released_s, tr.sent_s, tr.first_byte_s = 10.0004, 10.0005, 10.020
    tr.first_token_s, tr.end_s = 10.021, 10.050
    tr.chunk_times = [10.021, 10.030, 10.050]
    tr.usage_prompt_tokens, tr.usage_output_tokens = usage_prompt, 3
    tr.http_status, tr.finish_reason = 200, "length"
    if kind is not None:
        tr.fail(kind, "why")
    return tr


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        (None, Status.OK),
        (ErrorKind.EARLY_STOP, Status.INCOMPLETE),
        (ErrorKind.CANCELLED, Status.INCOMPLETE),
        (ErrorKind.CONNECTION_RESET, Status.ERROR),
        (ErrorKind.HTTP_STATUS, Status.ERROR),
    ],
)
def test_status_follows_the_error_class(kind: ErrorKind | None, status: Status) -> None:
    row, got = request_row(_trace(kind), math.nan, "measure")
    assert got is status
    assert row["error_kind"] == ("" if kind is None else str(kind))


def test_dispatch_lag_excludes_the_concurrency_caps_slide() -> None:
    row, _ = request_row(_trace(), 0.0003, "warmup")
    assert row["dispatch_lag_s"] == pytest.approx(0.0002)  # 0.5 ms late, 0.3 ms of it the cap's
    assert row["cap_delay_s"] == 0.0003 and row["phase"] == "warmup"
    assert row["chunks"] == 3 and row["output_tokens"] == 3
    no_cap, _ = request_row(_trace(), math.nan, "measure")
    assert math.isnan(no_cap["dispatch_lag_s"])  # the caller passes 0 when nothing slid


def test_prompt_tokens_come_from_usage_when_the_server_sent_it() -> None:
    assert request_row(_trace(usage_prompt=97), 0.0, "measure")[0]["prompt_tokens"] == 97
    assert request_row(_trace(usage_prompt=-1), 0.0, "measure")[0]["prompt_tokens"] == 100


def test_rows_fit_the_files_schema() -> None:
    rows = [request_row(_trace(k), 0.0, "measure")[0] for k in (None, ErrorKind.TIMEOUT)]
    table = pa.Table.from_pylist(rows, schema=BENCH_REQUEST_SCHEMA)
    assert table.num_rows == 2 and set(rows[0]) == set(BENCH_REQUEST_SCHEMA.names)
