"""The probe layer: timeouts, missing tools, redaction, and a capture with a stand-in nvidia-smi."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from kvscope.doctor import ProbeOptions, capture, doctor_offline
from kvscope.doctor.bundle import Bundle
from kvscope.doctor.hostfacts import filter_env, library_paths
from kvscope.doctor.probe import run_command

FIX = Path(__file__).parent / "fixtures"


def test_missing_tool_is_recorded_not_raised() -> None:
    status, rc, out, err = run_command(["kvscope-no-such-tool-xyz", "-q"], 1.0)
    assert (status, rc, out) == ("missing", None, "")
    assert "not found" in err


def test_nonzero_exit_keeps_both_streams() -> None:
    status, rc, out, err = run_command(["sh", "-c", "echo out; echo err >&2; exit 3"], 5.0)
    assert (status, rc, out.strip(), err.strip()) == ("failed", 3, "out", "err")


def test_hung_command_and_its_children_are_killed() -> None:
    t0 = time.perf_counter()
    # the grandchild keeps stdout open: only killing the whole process group ends the read
    status, rc, _, _ = run_command(["sh", "-c", "sleep 30 & sleep 30"], 0.5)
    assert status == "timeout" and rc is None
    assert time.perf_counter() - t0 < 5.0


def test_env_filter_keeps_serving_variables_and_redacts_secrets() -> None:
    env = {
        "NCCL_DEBUG": "WARN",
        "VLLM_API_KEY": "s3cret",
        "HF_TOKEN": "hf_x",
        "HOME": "/root",
        "LD_PRELOAD": "/x/libnccl.so.2",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    assert filter_env(env) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "LD_PRELOAD": "/x/libnccl.so.2",
        "NCCL_DEBUG": "WARN",
        "VLLM_API_KEY": "<redacted>",
    }


def test_library_paths_reads_ldconfig_lines() -> None:
    text = (FIX / "healthy_h100" / "ldconfig.txt").read_text()
    got = library_paths(text)
    assert set(got) == {
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib/x86_64-linux-gnu/libcuda.so",
    }


def fake_nvidia_smi(bindir: Path, fixture: Path | None, hang_s: float = 0.0) -> None:
    """A stand-in ``nvidia-smi`` that replays a fixture's outputs (or hangs)."""
    bindir.mkdir(parents=True, exist_ok=True)
    if hang_s:
        body = f"sleep {hang_s}\n"
    else:
        body = (
            'case "$1" in\n'
            f"  -q) cat '{fixture}/nvidia_smi_xml.xml' ;;\n"
            f"  topo) cat '{fixture}/nvidia_smi_topo.txt' ;;\n"
            f"  nvlink) cat '{fixture}/nvidia_smi_nvlink.txt' ;;\n"
            "esac\n"
        )
    exe = bindir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


@pytest.mark.integration
def test_capture_with_stand_in_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvidia_smi(tmp_path / "bin", FIX / "throttled_gpu")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    root = capture(tmp_path / "bundle", ProbeOptions(python=sys.executable))
    b = Bundle.load(root)
    names = {p.name: p for p in b.manifest.probes}
    assert names["nvidia_smi_xml"].status == "ok"
    assert b.text("nvidia_smi_xml") == (FIX / "throttled_gpu" / "nvidia_smi_xml.xml").read_text()
    assert names["python_probe"].status == "ok"
    probe = b.json("python_probe")
    assert isinstance(probe, dict) and probe["torch"]["installed"] is True
    assert "/libc.so" in (b.text("process_maps") or "")  # the child's real maps
    assert json.loads((root / "env.json").read_text())["NCCL_P2P_DISABLE"] == "1"
    report = doctor_offline(root)
    statuses = {(c.id, c.subject.split(" (")[0]): c.status.value for c in report.checks}
    assert statuses[("gpu.clocks", "GPU 1")] == "fail"
    assert statuses[("env.NCCL_P2P_DISABLE", "environment")] == "fail"  # NVLink is up


@pytest.mark.integration
def test_hung_nvidia_smi_becomes_a_timeout_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_nvidia_smi(tmp_path / "bin", None, hang_s=60)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    t0 = time.perf_counter()
    # a missing interpreter is recorded too (and keeps this test fast)
    opts = ProbeOptions(python="kvscope-no-such-python", command_timeout_s=0.5)
    root = capture(tmp_path / "b", opts)
    assert time.perf_counter() - t0 < 10.0
    bundle = Bundle.load(root)
    rec = bundle.get("nvidia_smi_xml")
    assert rec.record.status == "timeout"
    assert "timed out after" in rec.why_not()
    assert bundle.get("python_probe").record.status == "missing"
    by = {c.id: c for c in doctor_offline(root).checks}
    assert by["gpu.pcie"].status.value == "skipped"
    assert "timed out" in by["gpu.pcie"].evidence[0]
    assert by["driver.runtime"].summary == "Python probe did not run"


def test_engine_process_maps_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--pid reads a running process's own maps and environment (here: this test process)."""
    monkeypatch.setenv("PATH", "/nonexistent")  # no tools: only in-process probes run
    opts = ProbeOptions(python="kvscope-no-such-python", pid=os.getpid())
    bundle = Bundle.load(capture(tmp_path / "b", opts))
    assert "/libc.so" in (bundle.text("engine_maps") or "")
    assert isinstance(bundle.json("engine_env"), dict)


def test_in_process_probe_that_hangs_is_abandoned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every probe has a limit, in-process reads too: a stuck statvfs becomes a timeout."""
    import kvscope.doctor.probe as probe

    def stuck() -> dict[str, object]:
        time.sleep(30)
        return {}

    monkeypatch.setattr(probe, "host_shm", stuck)
    monkeypatch.setenv("PATH", "/nonexistent")
    t0 = time.perf_counter()
    root = capture(
        tmp_path / "b", ProbeOptions(python="kvscope-no-such-python", command_timeout_s=0.2)
    )
    assert time.perf_counter() - t0 < 8.0  # limit 0.2 s + the 3 s grace, not 30 s
    bundle = Bundle.load(root)
    assert bundle.get("shm").record.status == "timeout"
    assert bundle.get("meminfo").record.status == "ok"
    (shm,) = doctor_offline(root).by_id("host.shm")
    assert shm.status.value == "skipped"
