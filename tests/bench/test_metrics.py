"""Headline figures of a bench run from hand-made rows with known answers."""

from __future__ import annotations

import math
from typing import Any

import pytest

from kvscope.bench.metrics import parse_slo, summarize
from kvscope.bench.records import BENCH_REQUEST_SCHEMA
from kvscope.errors import KvscopeError


def _row(i: int, arrival: float, lag: float = 0.0, **kw: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "request_id": f"r{i}",
        "arrival_s": arrival,
        "prompt_tokens": 100,
        "output_tokens": 11,
        "cached_prompt_tokens": 0,
        "first_scheduled_s": arrival + lag,
        "first_token_s": arrival + 0.1,
        "finish_s": arrival + 0.1 + 10 * 0.02,
        "preemptions": 0,
        "status": "ok",
        "error": "",
        "released_s": arrival + lag,
        "sent_s": arrival + lag,
        "first_byte_s": arrival + 0.05,
        "dispatch_lag_s": lag,
        "cap_delay_s": 0.0,
        "target_prompt_tokens": 100,
        "target_output_tokens": 11,
        "usage_prompt_tokens": 100,
        "chunks": 11,
        "http_status": 200,
        "error_kind": "",
        "finish_reason": "length",
        "phase": "measure",
    }
    row["ttft_s"] = row["first_token_s"] - arrival
    row["tpot_s"] = (row["finish_s"] - row["first_token_s"]) / 10
    row["e2e_s"] = row["finish_s"] - arrival
    row.update(kw)
    return row


def _summ(rows: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"open_loop": True, "capped": False, "slo": {}, "max_error_rate": 0.05}
    args.update(kw)
    return summarize(rows, BENCH_REQUEST_SCHEMA, [0.02] * 50, **args)


def test_figures_of_a_steady_run() -> None:
    rows = [_row(i, i * 0.1) for i in range(101)]  # 10 req/s for 10 s
    s = _summ(rows, slo={"ttft_p99_s": 0.2, "tpot_p99_s": 0.01})
    assert s["ttft_p99_s"] == pytest.approx(0.1)
    assert s["tpot_p50_s"] == pytest.approx(0.02)
    assert s["itl_p99_s"] == pytest.approx(0.02) and s["itl_gaps"] == 50
    assert s["e2e_p50_s"] == pytest.approx(0.3)
    assert s["requested_request_rate_per_s"] == pytest.approx(10.0)
    assert s["achieved_request_rate_per_s"] == pytest.approx(10.0)
    assert s["slo_met"] == {"ttft_p99_s": True, "tpot_p99_s": False}
    assert s["goodput_per_s"] == 0.0  # every request misses the 10 ms TPOT
    assert s["client_limited"] is False and s["warnings"] == []
    assert s["prompt_tokens_error"]["exact_share"] == 1.0


def test_dispatch_lag_over_5ms_flags_the_client() -> None:
    rows = [_row(i, i * 0.1, lag=0.008 if i % 10 == 0 else 0.0) for i in range(101)]
    s = _summ(rows)
    assert s["dispatch_lag_p99_s"] == pytest.approx(0.008)
    assert s["client_limited"] is True
    assert "the client limited this run" in s["warnings"][0]


def test_rate_shortfall_flags_the_client() -> None:
    # releases drift 2 % behind the schedule: 100 gaps of 0.102 s instead of 0.1 s
    rows = [_row(i, i * 0.1, lag=i * 0.002) for i in range(101)]
    s = _summ(rows)
    assert s["achieved_request_rate_per_s"] == pytest.approx(100 / 10.2)
    assert s["client_limited"] is True


def test_errors_are_counted_by_kind_and_kept_out_of_latency() -> None:
    rows = [_row(i, i * 0.1) for i in range(20)]
    rows[3] = _row(3, 0.3, status="error", error_kind="http_status", http_status=503)
    rows[4] = _row(4, 0.4, status="error", error_kind="timeout", first_token_s=math.nan)
    rows[5] = _row(5, 0.5, status="incomplete", error_kind="early_stop", ttft_s=9.0)
    s = _summ(rows, max_error_rate=0.05)
    assert s["errors_by_kind"] == {"early_stop": 1, "http_status": 1, "timeout": 1}
    assert s["errors_by_http_status"] == {"503": 1}
    assert s["error_rate"] == pytest.approx(2 / 20)
    assert s["error_rate_exceeded"] is True
    assert s["ttft_max_s"] == pytest.approx(0.1)  # the 9 s incomplete row is not in it
    assert s["completed"] == 17


def test_warmup_and_cooldown_rows_are_left_out() -> None:
    rows = [_row(i, i * 0.1, phase="warmup" if i < 10 else "measure") for i in range(50)]
    rows[0]["ttft_s"] = 5.0
    s = _summ(rows)
    assert s["requests_warmup"] == 10 and s["requests"] == 40
    assert s["ttft_max_s"] == pytest.approx(0.1)


def test_slo_parsing() -> None:
    assert parse_slo("ttft_p99=0.5,tpot_p99=50ms") == {"ttft_p99_s": 0.5, "tpot_p99_s": 0.05}
    assert parse_slo("e2e_p99.9=2s, itl_p50=20ms") == {"e2e_p999_s": 2.0, "itl_p50_s": 0.02}
    for bad in ("ttft=0.5", "ttft_p99", "ttft_p99=fast", "ttft_p99=-1", "queue_p99=1"):
        with pytest.raises(KvscopeError):
            parse_slo(bad)


def test_one_late_release_in_a_short_probe_is_not_the_client() -> None:
    # 24 requests: the P99 is the single worst release. One 8 ms hiccup of the host is not a
    # client that cannot keep up; two (8 % of the releases) are.
    one = [_row(i, i * 0.1, lag=0.008 if i == 5 else 0.0) for i in range(24)]
    s = _summ(one)
    assert s["dispatch_lag_p99_s"] > 0.005
    assert s["client_limited"] is False and s["warnings"] == []
    two = [_row(i, i * 0.1, lag=0.008 if i in (5, 17) else 0.0) for i in range(24)]
    assert _summ(two)["client_limited"] is True
