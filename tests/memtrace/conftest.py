"""Small generated snapshots shared by the memtrace tests (each a few thousand entries)."""

from __future__ import annotations

from pathlib import Path

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
