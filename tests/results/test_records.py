from __future__ import annotations

import math

import pytest

from kvscope.results import REQUEST_COLUMNS, RequestRecord, Status


def test_derived_latencies() -> None:
    r = RequestRecord(
        "r1",
        arrival_s=1.0,
        prompt_tokens=100,
        output_tokens=11,
        first_scheduled_s=1.1,
        first_token_s=1.5,
        finish_s=2.5,
    )
    assert r.ttft_s == pytest.approx(0.5)
    assert r.tpot_s == pytest.approx(0.1)  # 10 gaps after the first token
    assert r.e2e_s == pytest.approx(1.5)
    row = r.row()
    assert tuple(row) == REQUEST_COLUMNS
    assert row["status"] == "ok"


def test_one_token_and_rejected_have_no_tpot_or_ttft() -> None:
    one = RequestRecord("a", 0.0, 10, 1, first_token_s=0.2, finish_s=0.2)
    assert math.isnan(one.tpot_s)
    rej = RequestRecord("b", 0.0, 10**6, 10, status=Status.REJECTED, error="longer than pool")
    assert math.isnan(rej.ttft_s)
    assert rej.row()["status"] == "rejected"
