"""The executor: the pool gives what this process gives, saved points are skipped on a rerun,
a half-written point is never taken as finished, a deadline stops new work."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kvscope.errors import KvscopeError
from kvscope.executor import Backend, PointResult, PointStore, PointTask, parse_backend, run_points
from kvscope.sim import SimConfig
from kvscope.tune.point import TIMING_KEYS, PointJob, simulate_point
from kvscope.workload.spec import build_workload

SLO = (("ttft_p99_s", 0.5), ("tpot_p99_s", 0.05))


def _workload() -> Any:
    return build_workload(
        None, "poisson:rate=30", "lognormal:median=400,sigma=0.8", "150", None, 150, None, 7, None
    )


def _tasks() -> list[PointTask]:
    out = []
    for tp in (1, 2):
        for mnbt in (None, 2048, 512):
            cfg = SimConfig(tp=tp, max_num_batched_tokens=mnbt, slo_ttft_s=0.5, slo_tpot_s=0.05)
            out.append(PointTask(f"tp{tp}-mnbt{mnbt}", PointJob(cfg, 150, 1.0, SLO)))
    return out


def _strip(figs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in figs.items() if k not in TIMING_KEYS}


def test_pool_matches_serial_and_a_rerun_skips_saved_points(tmp_path: Path) -> None:
    w = _workload()
    serial = run_points(simulate_point, _tasks(), w, PointStore(tmp_path / "a"), Backend("serial"))
    seen: list[tuple[str, bool]] = []
    pool = run_points(
        simulate_point,
        _tasks(),
        w,
        PointStore(tmp_path / "b"),
        Backend("local", 2),
        on_done=lambda t, f, r: seen.append((t.key, r)),
    )
    assert {k: _strip(v) for k, v in serial.items()} == {k: _strip(v) for k, v in pool.items()}
    assert sorted(k for k, _ in seen) == sorted(t.key for t in _tasks())
    assert not any(resumed for _, resumed in seen)
    # the configurations differ, so do their figures (the test can fail)
    assert len({round(v["ttft_p99_s"], 9) for v in serial.values()}) > 1
    stamp = {k: (tmp_path / "b" / k / "summary.json").stat().st_mtime_ns for k in pool}
    seen.clear()
    again = run_points(
        simulate_point,
        _tasks(),
        w,
        PointStore(tmp_path / "b"),
        Backend("local", 2),
        on_done=lambda t, f, r: seen.append((t.key, r)),
    )
    assert again == pool
    assert all(resumed for _, resumed in seen)
    assert stamp == {k: (tmp_path / "b" / k / "summary.json").stat().st_mtime_ns for k in pool}


def test_a_half_written_point_is_run_again(tmp_path: Path) -> None:
    store = PointStore(tmp_path)
    task = _tasks()[0]
    figs = store.save(task.key, PointResult({"a": 1}, {"goodput_per_s": 1.5}))
    assert store.load(task.key) == figs == {"goodput_per_s": 1.5}
    # a crash between the tables and the summary leaves only the temporary folder
    (tmp_path / f".{task.key}.tmp").mkdir()
    (tmp_path / task.key / "summary.json").unlink()
    assert store.load(task.key) is None
    out = run_points(simulate_point, [task], _workload(), store, Backend("serial"))
    assert out[task.key]["status"] == "ok" and store.load(task.key) == out[task.key]
    assert not (tmp_path / f".{task.key}.tmp").exists()


def test_a_point_saved_under_another_key_is_not_taken(tmp_path: Path) -> None:
    store = PointStore(tmp_path)
    store.save("one", PointResult({}, {"x": 1}))
    (tmp_path / "one").rename(tmp_path / "two")
    assert store.load("two") is None


def test_a_past_deadline_starts_nothing(tmp_path: Path) -> None:
    out = run_points(
        simulate_point,
        _tasks(),
        _workload(),
        PointStore(tmp_path),
        Backend("serial"),
        deadline=time.monotonic() - 1,
    )
    assert out == {}


def test_a_configuration_that_does_not_start_is_a_failed_point(tmp_path: Path) -> None:
    cfg = SimConfig(gpu="L4", max_model_len=131072)
    out = run_points(
        simulate_point,
        [PointTask("l4", PointJob(cfg, 20, 1.0, SLO))],
        _workload(),
        PointStore(tmp_path),
        Backend("serial"),
    )
    assert out["l4"]["status"] == "failed"
    assert "does not start" in out["l4"]["error"]


def test_backend_flags() -> None:
    assert parse_backend(None, 1) == Backend("serial", 1)
    assert parse_backend(None, 3) == Backend("local", 3)
    assert parse_backend("auto", None).kind == "ray"
    with pytest.raises(KvscopeError, match="--workers"):
        parse_backend(None, 0)
    with pytest.raises(KvscopeError, match="--ray"):
        parse_backend("  ", None)
