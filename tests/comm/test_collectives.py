"""Bandwidth definitions pinned to published nccl-tests output; buffer sizes and names."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.comm.collectives import (
    OPS,
    algbw_bytes_per_s,
    buffers_for,
    bus_factor,
    busbw_bytes_per_s,
    canonical_dtype,
    canonical_op,
)
from kvscope.errors import KvscopeError, UnknownNameError


def test_sendrecv_matches_published_nccl_tests_line() -> None:
    # sendrecv_perf on 8 A100s (li-plus/playground, cuda/nccl.md): 134217728 B in
    # 1211.2 us -> algbw 110.81 GB/s, busbw 110.81 GB/s.
    assert algbw_bytes_per_s(134217728, 1211.2e-6) / 1e9 == pytest.approx(110.81, abs=0.01)
    assert busbw_bytes_per_s("send_recv", 134217728, 1211.2e-6, 8) / 1e9 == pytest.approx(
        110.81, abs=0.01
    )


def test_all_reduce_matches_published_nccl_tests_line() -> None:
    # all_reduce_perf on 8 GPUs (public log): 134217728 B in 592.8 us -> algbw 226.39,
    # busbw 396.19 GB/s (nccl-tests prints time rounded to 0.1 us, hence the tolerance).
    assert algbw_bytes_per_s(134217728, 592.8e-6) / 1e9 == pytest.approx(226.39, rel=2e-4)
    assert busbw_bytes_per_s("all_reduce", 134217728, 592.8e-6, 8) / 1e9 == pytest.approx(
        396.19, rel=2e-4
    )


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 4, 1.5),
        ("all_reduce", 2, 1.0),
        ("all_gather", 4, 0.75),
        ("reduce_scatter", 8, 0.875),
        ("all_to_all", 2, 0.5),
        ("broadcast", 4, 1.0),
        ("send_recv", 4, 1.0),
        ("all_reduce", 1, 0.0),
    ],
)
def test_bus_factors_of_performance_md(op: str, n: int, factor: float) -> None:
    assert bus_factor(op, n) == pytest.approx(factor)


def test_buffers_follow_nccl_tests_size_convention() -> None:
    # all_gather: S is the gathered array; 1000 B of float32 on 4 ranks -> 62 elements
    # per rank, 248 gathered, S = 992 B.
    b = buffers_for("all_gather", 1000, "float32", 4)
    assert (b.input_elems, b.output_elems, b.size_bytes) == (62, 248, 992)
    rs = buffers_for("reduce_scatter", 1000, "float32", 4)
    assert (rs.input_elems, rs.output_elems, rs.size_bytes) == (248, 62, 992)
    ar = buffers_for("all_reduce", 1000, "bf16", 4)
    assert (ar.input_elems, ar.output_elems, ar.size_bytes) == (500, 500, 1000)


@settings(deadline=None)  # timing on a shared 2-core host is not the property
@given(
    st.sampled_from(OPS),
    st.integers(min_value=1, max_value=1 << 26),
    st.sampled_from(["float32", "float16"]),
    st.integers(min_value=2, max_value=64),
)
def test_buffers_never_exceed_request_by_more_than_one_chunk(
    op: str, requested: int, dtype: str, n: int
) -> None:
    b = buffers_for(op, requested, dtype, n)
    elem = 4 if dtype == "float32" else 2
    floor = n * elem  # smallest size a chunked operation can have
    assert b.size_bytes <= max(requested, floor)
    assert b.size_bytes > requested - n * elem
    assert b.input_elems >= 1 and b.output_elems >= 1


def test_names_and_errors() -> None:
    assert canonical_op("All-Reduce") == "all_reduce"
    assert canonical_op("alltoall") == "all_to_all"
    assert canonical_dtype("bf16") == "bfloat16"
    with pytest.raises(UnknownNameError, match="allreduse"):
        canonical_op("allreduse")
    with pytest.raises(UnknownNameError):
        canonical_dtype("fp7")
    with pytest.raises(KvscopeError, match="at least 2 ranks"):
        buffers_for("send_recv", 1024, "float32", 1)
