"""Environment capture: the variables kept, and GPU topology from a real nvidia-smi call."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kvscope.comm.environment import capture_environment, comm_variables, gpu_topology


def test_only_communication_variables_are_kept() -> None:
    env = {
        "NCCL_IB_HCA": "mlx5_0",
        "GLOO_SOCKET_IFNAME": "lo",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        "MASTER_PORT": "29500",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "x",
        "NCCLX": "no",
    }
    assert comm_variables(env) == {
        "GLOO_SOCKET_IFNAME": "lo",
        "MASTER_PORT": "29500",
        "NCCL_IB_HCA": "mlx5_0",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    }


def test_topology_unavailable_without_nvidia_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert gpu_topology() == "unavailable: nvidia-smi not found"


def _fake_smi(tmp_path: Path, body: str) -> None:
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_topology_is_the_matrix_nvidia_smi_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_smi(
        tmp_path, 'test "$1 $2" = "topo -m" || exit 9\nprintf "\tGPU0\tGPU1\nGPU0\t X \tNV18\n"\n'
    )
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert gpu_topology() == "\tGPU0\tGPU1\nGPU0\t X \tNV18"


def test_topology_reports_a_failing_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_smi(
        tmp_path, 'echo "NVIDIA-SMI has failed because it couldn\'t communicate" >&2\nexit 9\n'
    )
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpu_topology().startswith("unavailable: nvidia-smi exited 9 (NVIDIA-SMI has failed")


def test_capture_on_this_host() -> None:
    pytest.importorskip("torch")
    env = capture_environment("gloo", 2)
    assert env["backend"] == "gloo" and env["world_size"] == 2
    assert env["gloo_available"] is True
    assert env["torch_version"].startswith("2.")
    assert isinstance(env["variables"], dict)
    assert env["gpu_topology"]
