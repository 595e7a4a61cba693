"""Allocated/reserved over time: anchored on the end state, peaks kept by downsampling."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.memtrace.analysis import analyze
from kvscope.memtrace.columns import to_columns
from kvscope.memtrace.generator import GeneratorConfig, generate
from kvscope.memtrace.load import load_snapshot
from kvscope.memtrace.timeline import DeviceSeries, device_series, downsample

MIB = 1 << 20


def test_fragmentation_peaks(snaps: dict[str, Path]) -> None:
    r = analyze(load_snapshot(snaps["fragmentation"])[0])
    d = r.devices[0]
    assert d.peak_allocated_bytes == 30 * MIB  # 10 x 2 MiB - 5 x 2 MiB + 4 x 5 MiB
    assert d.peak_reserved_bytes == 40 * MIB
    assert d.end_allocated_bytes == 20 * MIB


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 1000), steps=st.integers(1, 30))
def test_complete_trace_starts_from_zero(seed: int, steps: int) -> None:
    """The generator records from the first allocation, so anchoring on the end state must
    put the level before the first entry at exactly 0."""
    cfg = GeneratorConfig(
        scenario="leak",
        seed=seed,
        steps=steps,
        weight_tensors=2,
        kv_cache_bytes=64 * MIB,
        step_s=0.3,
    )
    cols = to_columns(generate(cfg))
    s = device_series(cols)[0]
    # entry 0 is the first cudaMalloc: nothing allocated yet, one segment reserved
    assert s.allocated_bytes[0] == 0
    assert s.reserved_bytes[0] == cols.trace.size[0]
    assert s.reserved_bytes.min() >= 0 and s.allocated_bytes.min() >= 0
    assert (s.allocated_bytes <= s.reserved_bytes).all()


def test_ring_buffer_tail_is_anchored(snaps: dict[str, Path]) -> None:
    """Dropping the first half of the trace (as a ring buffer would) changes nothing after
    the cut."""
    import pickle

    full = pickle.loads(snaps["leak"].read_bytes())
    cut = pickle.loads(snaps["leak"].read_bytes())
    half = len(cut["device_traces"][0]) // 2
    cut["device_traces"][0] = cut["device_traces"][0][half:]
    a = device_series(to_columns(full))[0]
    b = device_series(to_columns(cut))[0]
    np.testing.assert_array_equal(a.allocated_bytes[half:], b.allocated_bytes)
    np.testing.assert_array_equal(a.reserved_bytes[half:], b.reserved_bytes)


def test_downsample_keeps_the_peak() -> None:
    t = np.linspace(0, 10, 10_001)
    a = np.zeros(t.size, np.int64)
    a[4321] = 99
    s = DeviceSeries(0, 0, t.size, t, a, a.copy())
    d = downsample(s, 100)
    assert d.t_s.size <= 100
    assert d.allocated_bytes.max() == 99


def test_window(snaps: dict[str, Path]) -> None:
    cols = load_snapshot(snaps["leak"])[0]
    r = analyze(cols, since_s=10.0, until_s=20.0)
    d = r.devices[0]
    assert d.start_t_s >= 10.0 and d.end_t_s <= 20.0
    assert 0 < r.entries_in_window < r.trace_entries


def test_expandable_map_unmap_and_pending_free(handmade: Callable[[], dict[str, Any]]) -> None:
    lv = device_series(to_columns(handmade()))
    d0, d1 = lv
    # device 0: segment_map of 4 MiB is the first entry; the end state has 4 MiB reserved
    assert d0.reserved_bytes.tolist() == [4 * MIB] * 9
    # pending-free blocks still count as allocated until free_completed
    assert d0.allocated_bytes[-1] == (MIB - 100) + MIB + MIB
    # device 1: +2 MiB segment, then an unmap of a range mapped before the trace began
    assert d1.reserved_bytes.tolist() == [4 * MIB] * 4 + [2 * MIB]
    assert d1.allocated_bytes.tolist() == [0, 4096, 4096, 0, 0]
