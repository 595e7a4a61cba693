"""Small generated snapshots shared by the memtrace tests (each a few thousand entries)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvscope.memtrace.caching_allocator import MIB
from kvscope.memtrace.generator import GeneratorConfig, write_snapshot

#: The leak scenario used in tests: 1 MiB every 1 s for 60 s of 0.2 s decode steps.
LEAK = GeneratorConfig(scenario="leak", steps=300, step_s=0.2, weight_tensors=8, seed=3)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own kvscope cache directory."""
    monkeypatch.setenv("KVSCOPE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="session")
def snaps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("snaps")
    cfgs = {
        "steady": GeneratorConfig(scenario="steady", steps=300, step_s=0.2, weight_tensors=8),
        "leak": LEAK,
        "leak_fast": GeneratorConfig(
            scenario="leak",
            steps=300,
            step_s=0.2,
            weight_tensors=8,
            leak_bytes=2 * MIB,
            leak_period_s=0.5,
            seed=4,
        ),
        "fragmentation": GeneratorConfig(scenario="fragmentation"),
        "oom": GeneratorConfig(scenario="oom"),
        "legacy": GeneratorConfig(scenario="oom", flavor="legacy"),
        "two_devices": GeneratorConfig(scenario="fragmentation", devices=2),
    }
    return {k: write_snapshot(c, d / f"{k}.pickle") for k, c in cfgs.items()}


F_USER = {"filename": "train.py", "line": 7, "name": "step"}
F_CPP = {"filename": "??", "line": 0, "name": "c10::cuda::CUDACachingAllocator::malloc"}


def _entry(action: str, addr: int, size: int, t: int, **kw: Any) -> dict[str, Any]:
    e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t}
    e["frames"] = [F_CPP, F_USER]
    e.update(kw)
    return e


def handmade_snapshot() -> dict[str, Any]:
    """Two devices; both pending-free spellings; expandable mapping; an unknown action."""
    base0, base1 = 0x7F0000000000, 0x7F1000000000
    seg0 = {
        "device": 0,
        "address": base0,
        "total_size": 4 * MIB,
        "allocated_size": MIB,
        "active_size": 3 * MIB,
        "requested_size": MIB - 100,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": True,
        "frames": [],
        "blocks": [
            {
                "address": base0,
                "size": MIB,
                "requested_size": MIB - 100,
                "state": "active_allocated",
                "frames": [F_CPP, F_USER],
            },
            {
                "address": base0 + MIB,
                "size": MIB,
                "requested_size": MIB,
                "state": "active_pending_free",
                "frames": [],
            },
            {
                "address": base0 + 2 * MIB,
                "size": MIB,
                "requested_size": MIB,
                "state": "active_awaiting_free",
                "frames": [],
            },
            {
                "address": base0 + 3 * MIB,
                "size": MIB,
                "requested_size": 0,
                "state": "inactive",
                "frames": [],
            },
        ],
    }
    seg1 = {
        "device": 1,
        "address": base1,
        "total_size": 2 * MIB,
        "allocated_size": 0,
        "active_size": 0,
        "stream": 7,
        "segment_type": "small",
        "blocks": [{"size": 2 * MIB, "state": "inactive"}],
    }
    dev0 = [
        _entry("segment_map", base0, 4 * MIB, 10),
        _entry("alloc", base0, MIB - 100, 11),
        _entry("alloc", base0 + MIB, MIB, 12),
        _entry("alloc", base0 + 2 * MIB, MIB, 13),
        _entry("free_requested", base0 + MIB, MIB, 14),
        _entry("free_requested", base0 + 2 * MIB, MIB, 15),
        {
            "action": "oom",
            "size": 64 * MIB,
            "stream": 0,
            "device_free": 5 * MIB,
            "time_us": 16,
            "frames": [F_CPP, F_USER],
        },
        _entry("workspace_snapshot", 0, 0, 17),
        _entry("snapshot", 0, 0, 18),
    ]
    dev1 = [
        _entry("segment_alloc", base1, 2 * MIB, 20),
        _entry("alloc", base1, 4096, 21),
        _entry("free_requested", base1, 4096, 22),
        _entry("free_completed", base1, 4096, 23),
        _entry("segment_unmap", base1 + 2 * MIB, 2 * MIB, 24),
    ]
    return {
        "segments": [seg0, seg1],
        "device_traces": [dev0, dev1],
        "allocator_settings": {"max_split_size": 2**64 - 1},
    }


@pytest.fixture
def handmade() -> Callable[[], dict[str, Any]]:
    """A factory of the hand-written two-device snapshot (a fresh copy per call)."""
    return handmade_snapshot
