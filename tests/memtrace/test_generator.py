"""The generator writes the real format: PyTorch's own reader accepts it, its books balance,
and the scenarios contain what their docstrings promise."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import ConfigError
from kvscope.memtrace.caching_allocator import MIB, round_size, segment_size_for
from kvscope.memtrace.generator import GeneratorConfig, generate


def test_torch_memory_viz_reads_generated_snapshot(snaps: dict[str, Path]) -> None:
    viz = pytest.importorskip("torch.cuda._memory_viz")
    data = pickle.loads(snaps["oom"].read_bytes())
    stats = viz.segsum(data)  # asserts free_internal + free_external + allocated == reserved
    assert "total_reserved: 40.0MiB" in stats
    assert "total_allocated: 20.0MiB" in stats
    text = viz.trace(data)
    assert "raise OutOfMemoryError # 12.0MiB requested, 8.0MiB free in CUDA" in text


def test_allocator_constants() -> None:
    # c10/cuda/CUDACachingAllocator.cpp: 512 B rounding, 2 MiB small / 20 MiB large buffers
    assert round_size(1) == 512
    assert round_size(513) == 1024
    assert segment_size_for(1 * MIB) == 2 * MIB
    assert segment_size_for(1 * MIB + 512) == 20 * MIB
    assert segment_size_for(10 * MIB) == 10 * MIB
    assert segment_size_for(11 * MIB) == 12 * MIB


def test_frames_are_shared_like_py_symbolize() -> None:
    snap = generate(GeneratorConfig(scenario="steady", steps=5, weight_tensors=2))
    assert isinstance(snap, dict)
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    assert allocs[0]["frames"] is not allocs[1]["frames"]  # one list per traceback
    assert allocs[0]["frames"][0] is allocs[1]["frames"][0]  # one dict per frame


def test_bad_scenario() -> None:
    with pytest.raises(ConfigError, match="scenario"):
        generate(GeneratorConfig(scenario="explode"))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), steps=st.integers(1, 40), leak=st.booleans())
def test_segments_balance(seed: int, steps: int, leak: bool) -> None:
    cfg = GeneratorConfig(
        scenario="leak" if leak else "steady",
        seed=seed,
        steps=steps,
        weight_tensors=3,
        kv_cache_bytes=64 * MIB,
        step_s=0.5,
    )
    snap = generate(cfg)
    assert isinstance(snap, dict)
    for seg in snap["segments"]:
        sizes = [b["size"] for b in seg["blocks"]]
        assert sum(sizes) == seg["total_size"]
        active = sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
        assert active == seg["allocated_size"]
        addr = seg["address"]
        for b in seg["blocks"]:  # blocks tile the segment in address order
            assert b["address"] == addr
            addr += b["size"]
    # every trace alloc is either freed later or still an active block at the end
    live: dict[int, int] = {}
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            assert live.pop(e["addr"]) == e["size"]
    end = {
        b["address"]: b["requested_size"]
        for s in snap["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    }
    assert live == end
