"""A measured link from `kvscope comm bench` feeds `kvscope plan --comm-run`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvscope.results import RunDir


def _plan(*extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kvscope.cli.main",
            "plan",
            "--model",
            "llama-3.1-70b",
            "--gpu",
            "h100",
            "--tensor-parallel-size",
            "4",
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_fitted_link_replaces_the_catalogue_link(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "comm", "comm")
    # A slow link: 50 us per step, 10 GB/s (PCIe-class), as a comm run would fit it.
    run.write_summary(
        {"op": "all_reduce", "world_size": 4}, {"fit": {"alpha_s": 50e-6, "beta_s_per_byte": 1e-10}}
    )
    base = _plan()
    slow = _plan("--comm-run", str(run.path))
    assert base.returncode == 0 and slow.returncode == 0, slow.stderr
    b, s = json.loads(base.stdout)["comm"], json.loads(slow.stdout)["comm"]
    assert s["decode"]["tp_s"] > b["decode"]["tp_s"]
    assert s["link"]["bandwidth_bytes_per_s"] == 1e10
    assert json.loads(slow.stdout)["comm"]["link"]["alpha_s"] == 6 * 50e-6  # 2(n-1) steps


@pytest.mark.parametrize("name", ["", "x" * 300])
def test_not_a_comm_run_is_one_line(tmp_path: Path, name: str) -> None:
    # "x" * 300: a name the OS cannot hold (ENAMETOOLONG), which Path.is_file() raises on
    out = _plan("--comm-run", str(tmp_path / name))
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1
    assert "comm bench" in out.stderr


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `kvscope comm bench` run: 2 gloo ranks on this CPU, all-reduce 1..16 MiB, 5
    iterations (at 256 KiB..4 MiB and 3 iterations a clean-clone run once fitted no bandwidth
    term: the small sizes' timings were all latency on a 2-core machine)."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("comm") / "run"
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "kvscope.cli.main", "comm", "bench", "--world-size", "2"),
            *("--sizes", "1M:16M:x4", "--iters", "5", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.integration
def test_a_cpu_gloo_link_on_an_nvlink_plan_warns(gloo_run: Path) -> None:
    summary = json.loads((gloo_run / "summary.json").read_text())
    measured_gbps = summary["fit"]["bandwidth_gbps"]
    proc = _plan("--comm-run", str(gloo_run))
    assert proc.returncode == 0, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if "--comm-run" in ln]
    assert len(warned) == 1, proc.stderr
    line = warned[0]
    assert line.startswith("kvscope: warning: ")
    assert "gloo on CPU" in line and f"{measured_gbps:,.2f} GB/s" in line
    assert "H100-SXM-80GB NVLink at 450 GB/s per direction" in line  # gpus.json, H100 SXM
    doc = json.loads(proc.stdout)
    assert line.removeprefix("kvscope: warning: ") in doc["warnings"]
    assert doc["comm"]["link"]["name"] == f"measured ({gloo_run})"


@pytest.mark.integration
def test_a_link_like_the_planned_one_does_not_warn(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "comm", "comm")
    # As an NCCL run on NVLink H100s would fit it: 400 GB/s, above half of 450 GB/s.
    run.write_summary(
        {"op": "all_reduce", "world_size": 4, "backend": "nccl"},
        {
            "config": {"backend": "nccl"},
            "environment": {"backend": "nccl", "cuda_available": True},
            "fit": {"alpha_s": 8e-6, "beta_s_per_byte": 1 / 400e9},
        },
    )
    proc = _plan("--comm-run", str(run.path))
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    assert json.loads(proc.stdout)["warnings"] == []


@pytest.mark.integration
def test_a_slow_nccl_link_warns_without_saying_cpu(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "comm", "comm")
    run.write_summary(
        {"op": "all_reduce"},
        {
            "config": {"backend": "nccl"},
            "environment": {"cuda_available": True},
            "fit": {"alpha_s": 8e-6, "beta_s_per_byte": 1 / 25e9},  # PCIe-class
        },
    )
    proc = _plan("--comm-run", str(run.path))
    assert "measured with nccl at 25.00 GB/s" in proc.stderr and "CPU" not in proc.stderr
