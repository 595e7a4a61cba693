from __future__ import annotations

import itertools
import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.results import REQUEST_SCHEMA, RequestRecord, Status, goodput, latency_summary
from kvscope.results import percentiles as pct


def test_percentiles_of_1_to_100() -> None:
    p = pct(range(1, 101))
    assert p["p50"] == pytest.approx(50.5)
    assert p["p99"] == pytest.approx(99.01)
    assert p["p999"] == pytest.approx(99.901)
    assert p["max"] == 100 and p["count"] == 100


def test_nan_is_ignored_and_empty_is_nan() -> None:
    assert pct([1.0, float("nan"), 3.0])["p50"] == 2.0
    assert math.isnan(pct([])["p99"])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=200))
def test_percentiles_are_ordered_and_bounded(xs: list[float]) -> None:
    p = pct(xs)
    ordered = [p["p50"], p["p90"], p["p95"], p["p99"], p["p999"], p["max"]]
    assert all(a <= b + 1e-9 for a, b in itertools.pairwise(ordered))
    assert min(xs) - 1e-9 <= p["p50"] <= max(xs) + 1e-9


def _table() -> pa.Table:
    recs = [
        RequestRecord("a", 0.0, 100, 11, 0, 0.0, 0.2, 1.2),  # ttft 0.2, tpot 0.1
        RequestRecord("b", 1.0, 100, 11, 0, 1.0, 1.8, 2.8),  # ttft 0.8, tpot 0.1
        RequestRecord("c", 2.0, 100, 3, 0, 2.0, 2.1, 4.1),  # ttft 0.1, tpot 1.0
        RequestRecord("d", 3.0, 100, 0, status=Status.ERROR, error="HTTP 500"),
    ]
    return pa.Table.from_pylist([r.row() for r in recs], schema=REQUEST_SCHEMA)


def test_latency_summary_and_goodput() -> None:
    t = _table()
    s = latency_summary(t, slo={"ttft_s": 0.5, "tpot_s": 0.2}, duration_s=5.0)
    assert s["completed"] == 3 and s["errors"] == 1
    assert s["ttft_p50_s"] == pytest.approx(0.2)
    assert s["output_token_throughput_per_s"] == pytest.approx(25 / 5)
    # only "a" meets both SLOs: b's TTFT and c's TPOT are over
    assert s["goodput_per_s"] == pytest.approx(1 / 5)
    assert goodput(t, {"ttft_s": 1.0}, 5.0) == pytest.approx(3 / 5)
    assert np.isnan(latency_summary(t.slice(3, 1))["ttft_p50_s"])
