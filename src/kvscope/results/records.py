"""The per-request record of a run directory (``requests.parquet``): one row per request.

Times are seconds from the run's start. ``ttft_s`` = first_token_s - arrival_s;
``tpot_s`` = (finish_s - first_token_s) / (output_tokens - 1), the mean time per output token
after the first (the definition vLLM's benchmark_serving uses); ``e2e_s`` = finish_s -
arrival_s. Undefined values are NaN (e.g. TPOT of a one-token answer, TTFT of a rejected
request).
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa


class Status(enum.StrEnum):
    OK = "ok"
    ERROR = "error"
    REJECTED = "rejected"
    INCOMPLETE = "incomplete"


REQUEST_SCHEMA = pa.schema(
    [
        ("request_id", pa.string()),
        ("arrival_s", pa.float64()),
        ("prompt_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("cached_prompt_tokens", pa.int64()),
        ("first_scheduled_s", pa.float64()),
        ("first_token_s", pa.float64()),
        ("finish_s", pa.float64()),
        ("ttft_s", pa.float64()),
        ("tpot_s", pa.float64()),
        ("e2e_s", pa.float64()),
        ("preemptions", pa.int64()),
        ("status", pa.string()),
        ("error", pa.string()),
    ]
)

REQUEST_COLUMNS: tuple[str, ...] = tuple(REQUEST_SCHEMA.names)

NAN = math.nan


@dataclass(frozen=True)
class RequestRecord:
    """One finished (or failed) request; derived latencies computed from the timestamps."""

    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    cached_prompt_tokens: int = 0
    first_scheduled_s: float = NAN
    first_token_s: float = NAN
    finish_s: float = NAN
    preemptions: int = 0
    status: Status = Status.OK
    error: str = ""

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        if self.output_tokens < 2:
            return NAN
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s

    def row(self) -> dict[str, Any]:
        """The record as a row of :data:`REQUEST_SCHEMA`."""
        d = asdict(self)
        d["status"] = str(self.status)
        d["ttft_s"] = self.ttft_s
        d["tpot_s"] = self.tpot_s
        d["e2e_s"] = self.e2e_s
        return {name: d[name] for name in REQUEST_COLUMNS}
