"""The columnar Workload: ordering, ragged hashes, transforms, files and determinism."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.workload.request import Request
from kvscope.workload.stream import Workload, take_ragged


def _sample() -> Workload:
    reqs = [
        Request("a", 3.0, 40, 5, (11, 12), 16, "s1", 0),
        Request("b", 1.0, 20, 7, (11,), 16, "s2", 0),
        Request("c", 2.0, 70, 9, (11, 12, 13, 14), 16, "s1", 1, "hi"),
        Request("d", 2.0, 8, 1),
    ]
    return Workload.from_requests(reqs, spec={"source": "test"})


def test_build_sorts_stably_and_keeps_rows_together() -> None:
    w = _sample()
    assert w.request_ids.tolist() == ["b", "c", "d", "a"]
    assert w.arrival_s.tolist() == [1.0, 2.0, 2.0, 3.0]
    assert w[1].prefix_hashes == (11, 12, 13, 14) and w[1].prompt_text == "hi"
    assert w[2].prefix_hashes == () and w[2].session_id is None and w[2].turn is None
    assert w[-1].request_id == "a" and w[-1].turn == 0
    assert [r.request_id for r in w] == ["b", "c", "d", "a"]


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 5), min_size=1, max_size=30),
    data=st.data(),
)
def test_take_ragged_matches_python_slicing(lengths: list[int], data: st.DataObject) -> None:
    off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    vals = np.arange(int(off[-1]), dtype=np.int64) * 7
    idx = np.array(data.draw(st.lists(st.integers(0, len(lengths) - 1), max_size=40)), np.int64)
    new_off, new_vals = take_ragged(off, vals, idx)
    expect = [v for i in idx for v in vals[off[i] : off[i + 1]].tolist()]
    assert new_vals.tolist() == expect
    assert np.diff(new_off).tolist() == [lengths[i] for i in idx]


def test_transforms_window_speedup_rate_limit_shift_sample() -> None:
    w = Workload.build(np.arange(10, 20, dtype=float), [5] * 10, [3] * 10)
    z = w.shift_to_zero()
    assert z.arrival_s[0] == 0 and z.duration_s == 9
    win = z.window(2.0, 5.0)
    assert win.arrival_s.tolist() == [2.0, 3.0, 4.0]
    fast = z.speedup(3.0)
    assert fast.duration_s == pytest.approx(3.0)
    r = z.rescale_rate(5.0)
    assert r.mean_rate_per_s == pytest.approx(5.0)
    assert len(z.limit(4)) == 4 and len(z.limit(100)) == 10
    s = z.sample(4, seed=1)
    assert len(s) == 4 and np.all(np.diff(s.arrival_s) >= 0)
    assert np.array_equal(s.arrival_s, z.sample(4, seed=1).arrival_s)
    ops = [t["op"] for t in r.spec["transforms"]]
    assert ops == ["shift", "speedup", "rescale_rate"]


def test_clamp_keeps_one_output_slot_and_counts_changes() -> None:
    w = Workload.build([0.0, 1.0, 2.0], [100, 5000, 8191], [100, 100, 100])
    c = w.clamp(8192)
    assert c.prompt_tokens.tolist() == [100, 5000, 8191]
    assert c.output_tokens.tolist() == [100, 100, 1]
    assert c.spec["transforms"][-1]["clamped_requests"] == 1


def test_bad_transform_arguments_are_user_errors() -> None:
    w = Workload.build([0.0, 1.0], [1, 1], [1, 1])
    for call in (
        lambda: w.speedup(0),
        lambda: w.limit(-1),
        lambda: w.sample(5),
        lambda: w.clamp(1),
        lambda: w.with_arrivals([0.0]),
    ):
        with pytest.raises(KvscopeError):
            call()
    with pytest.raises(KvscopeError, match="span 0"):
        Workload.build([1.0, 1.0], [1, 1], [1, 1]).rescale_rate(3)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_round_trip_keeps_every_column(tmp_path: Path, suffix: str) -> None:
    w = _sample()
    back = Workload.from_file(w.save(tmp_path / f"w{suffix}"))
    assert [r for r in back] == [r for r in w]
    assert back.hash_block_size == 16


def test_unknown_output_extension_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(KvscopeError, match=r"parquet or \.jsonl"):
        _sample().save(tmp_path / "w.csv")
