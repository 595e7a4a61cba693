"""The supervisor: a rank that dies or hangs ends the run fast, named, with no rank left.

These start real gloo ranks (processes) on this host.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import kvscope
from kvscope.comm.launch import (
    BARRIER,
    COLLECTIVE,
    OUTSIDE,
    RENDEZVOUS,
    Fault,
    Job,
    RankFailure,
    Step,
    _stall_message,
    launch,
)
from kvscope.comm.torchrun import torchrun_rank
from kvscope.errors import KvscopeError

pytest.importorskip("torch")

STEPS = tuple(Step("all_reduce", s, "float32", 1, 3) for s in (1024, 4096, 16384))


def _run(job: Job) -> tuple[list[int], RankFailure, float]:
    seen: list[int] = []
    t0 = time.monotonic()
    with pytest.raises(RankFailure) as info:
        launch(job, lambda i, times, wrong: seen.append(i))
    return seen, info.value, time.monotonic() - t0


@pytest.mark.integration
def test_healthy_run_delivers_every_step_in_order() -> None:
    got: list[tuple[int, tuple[int, ...], list[int]]] = []
    launch(Job("gloo", 2, STEPS, 20.0), lambda i, t, w: got.append((i, t.shape, w)))
    assert got == [(0, (2, 3), []), (1, (2, 3), []), (2, (2, 3), [])]
    assert mp.active_children() == []


@pytest.mark.integration
def test_rank_that_exits_is_named_and_the_rest_are_killed() -> None:
    job = Job("gloo", 4, STEPS, 20.0, fault=Fault(2, "exit", step=1))
    seen, err, elapsed = _run(job)
    assert err.rank == 2
    assert "rank 2 exited with code 17" in str(err)
    assert "step 1 (all_reduce, 4096 B" in str(err)
    assert "stopped ranks 0, 1 and 3" in str(err)
    assert seen == [0]  # the step measured before the failure still arrived
    assert elapsed < 10  # far below the 20 s stall timeout: death is seen at once
    assert mp.active_children() == []


@pytest.mark.integration
def test_rank_that_hangs_is_named_after_the_timeout() -> None:
    job = Job("gloo", 4, STEPS, 3.0, fault=Fault(1, "hang", step=0))
    _, err, elapsed = _run(job)
    assert err.rank == 1
    assert "rank 1 stopped making progress outside any collective" in str(err)
    assert "ranks 0, 2 and 3 waited in the barrier" in str(err)
    assert 3.0 <= elapsed < 12.0  # the timeout, then a prompt stop
    assert mp.active_children() == []


def test_stall_inside_the_collective_blames_the_collective() -> None:
    job = Job("gloo", 3, STEPS, 5.0)
    rows = [(COLLECTIVE, 1, 2, 9), (COLLECTIVE, 1, 2, 9), (COLLECTIVE, 1, 2, 8)]
    text, culprit = _stall_message(job, rows)
    assert culprit is None
    assert "collective itself hung" in text
    text, culprit = _stall_message(job, [(RENDEZVOUS, -1, -1, 1)] * 3)
    assert culprit is None and "rendezvous never completed" in text
    behind = [(BARRIER, 1, 2, 9), (OUTSIDE, 1, 1, 5), (BARRIER, 1, 2, 9)]
    text, culprit = _stall_message(job, behind)
    assert culprit == 1 and text.startswith("rank 1 stopped")


def test_fault_parsing() -> None:
    assert Fault.parse("2:exit") == Fault(2, "exit", 0)
    assert Fault.parse("1:hang@3") == Fault(1, "hang", 3)
    for bad in ("x:exit", "1:explode", "1"):
        with pytest.raises(KvscopeError):
            Fault.parse(bad)


def test_step_carries_dispatch_tokens() -> None:
    s = Step("all_to_all", 64, "float32", 0, 1, tokens=np.ones((1, 2, 2), dtype=np.int64))
    assert s.tokens is not None and s.tokens.shape == (1, 2, 2)


def test_torchrun_is_detected_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    assert torchrun_rank() is None
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert torchrun_rank() is None  # RANK alone (some schedulers set it) is not a launch
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "abc")
    assert torchrun_rank() == (3, 4)


@pytest.mark.slow
@pytest.mark.integration
def test_bench_under_torchrun(tmp_path: Path) -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed beside this python")
    env = {**os.environ, "PYTHONPATH": str(Path(kvscope.__file__).parents[1])}
    out = subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "kvscope.cli.main",
            "comm",
            "bench",
            "--sizes",
            "1K,16K",
            "--iters",
            "3",
            "--json",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)  # only rank 0 printed
    assert doc["environment"]["world_size"] == 2
    assert doc["environment"]["variables"]["WORLD_SIZE"] == "2"
    assert [r["wrong_ranks"] for r in doc["rows"]] == [[], []]
    assert (tmp_path / "summary.json").is_file()


@pytest.mark.slow
@pytest.mark.integration
def test_spawned_ranks_as_nccl_uses_them() -> None:
    # NCCL ranks are spawned (fresh interpreters, no inherited CUDA state); run that path
    # on gloo so the pickled job, pipes and shared progress array are exercised here.
    got: list[int] = []
    launch(Job("gloo", 2, STEPS[:1], 60.0), lambda i, t, w: got.append(i), "spawn")
    assert got == [0]
    assert mp.active_children() == []


@pytest.mark.integration
def test_rank_that_never_joins_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # Rank 1's worker hangs before the rendezvous: the startup allowance applies, then
    # the rank that never joined is named.
    from kvscope.comm import worker

    real = worker.run_rank

    def stuck_rank(rank: int, job: Job, progress: object, sink: object) -> None:
        if rank == 1:
            time.sleep(3600)
        real(rank, job, progress, sink)  # type: ignore[arg-type]

    monkeypatch.setattr(worker, "run_rank", stuck_rank)
    job = Job("gloo", 2, STEPS, 1.0, startup_timeout_s=2.0)
    _, err, elapsed = _run(job)
    assert err.rank == 1
    assert "rank 1 stopped making progress before reaching the rendezvous" in str(err)
    assert "while rank 0 waited at the rendezvous" in str(err)
    assert "no rank moved for 2 s" in str(err)
    assert 2.0 <= elapsed < 10.0
