"""One finished request as a row of a bench run's ``requests.parquet``, and that file's schema.

The shared columns (``kvscope.results.REQUEST_SCHEMA``, the same ones ``kvscope simulate``
writes) come first, then the client-side ones: release and send times, dispatch lag,
concurrency-cap delay, targets, server usage, chunk count, HTTP status, error class, phase,
resends.
Times are seconds from the run's start.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from kvscope.bench.client import ErrorKind, Trace
from kvscope.results import REQUEST_SCHEMA, RequestRecord, Status

BENCH_EXTRA_FIELDS = [
    ("released_s", pa.float64()),
    ("sent_s", pa.float64()),
    ("first_byte_s", pa.float64()),
    ("dispatch_lag_s", pa.float64()),
    ("cap_delay_s", pa.float64()),
    ("target_prompt_tokens", pa.int64()),
    ("target_output_tokens", pa.int64()),
    ("usage_prompt_tokens", pa.int64()),
    ("chunks", pa.int64()),
    ("http_status", pa.int64()),
    ("error_kind", pa.string()),
    ("finish_reason", pa.string()),
    ("phase", pa.string()),
    # times the request went out again because the pool's connection was already closed
    ("resends", pa.int64()),
]
#: ``requests.parquet`` of a bench run: the shared schema plus client-side columns.
BENCH_REQUEST_SCHEMA = pa.schema(list(REQUEST_SCHEMA) + [pa.field(*f) for f in BENCH_EXTRA_FIELDS])
#: ``chunks.parquet``: the arrival time of every streamed chunk (s from the run's start).
CHUNK_SCHEMA = pa.schema([("request_id", pa.string()), ("chunk_times_s", pa.list_(pa.float64()))])

_INCOMPLETE = {str(ErrorKind.EARLY_STOP), str(ErrorKind.CANCELLED)}


def request_row(tr: Trace, cap_delay_s: float, phase: str) -> tuple[dict[str, Any], Status]:
    """The row of a finished (or cut off) request and its status.

    ``cap_delay_s`` is how far the concurrency cap slid its release (NaN without a cap);
    ``phase`` is ``warmup``, ``measure`` or ``cooldown``.
    """
    kind = tr.error_kind
    status = Status.OK
    if kind in _INCOMPLETE:
        status = Status.INCOMPLETE
    elif kind:
        status = Status.ERROR
    row = RequestRecord(
        request_id=tr.request_id,
        arrival_s=tr.scheduled_s,
        prompt_tokens=tr.usage_prompt_tokens
        if tr.usage_prompt_tokens >= 0
        else tr.target_prompt_tokens,
        output_tokens=tr.output_tokens,
        cached_prompt_tokens=tr.cached_prompt_tokens,
        first_scheduled_s=tr.sent_s,
        first_token_s=tr.first_token_s,
        finish_s=tr.end_s,
        status=status,
        error=tr.error,
    ).row()
    row.update(
        released_s=tr.released_s,
        sent_s=tr.sent_s,
        first_byte_s=tr.first_byte_s,
        # the client's own lateness: request handed to the pool vs its (slid) target
        dispatch_lag_s=tr.sent_s - tr.scheduled_s - cap_delay_s,
        cap_delay_s=cap_delay_s,
        target_prompt_tokens=tr.target_prompt_tokens,
        target_output_tokens=tr.target_output_tokens,
        usage_prompt_tokens=tr.usage_prompt_tokens,
        chunks=len(tr.chunk_times),
        http_status=tr.http_status,
        error_kind=kind,
        finish_reason=tr.finish_reason,
        phase=phase,
        resends=tr.resends,
    )
    return row, status
