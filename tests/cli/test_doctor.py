"""``kvscope doctor`` as a user runs it: live on this (GPU-less) host, and over bundles."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from cli_helpers import run_kvscope

FIX = Path(__file__).parents[1] / "doctor" / "fixtures"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_kvscope("doctor", *args, env=env, timeout=120)


def _no_nvidia_path() -> dict[str, str]:
    """This machine has no nvidia-smi; drop any PATH entry that has one, to be sure."""
    env = dict(os.environ)
    keep = [p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists()]
    env["PATH"] = os.pathsep.join(keep)
    return env


@pytest.mark.integration
def test_live_run_without_gpu_skips_gpu_checks_and_checks_the_host(tmp_path: Path) -> None:
    t0 = time.perf_counter()
    out = run("--json", "--capture", str(tmp_path / "b"), env=_no_nvidia_path())
    wall = time.perf_counter() - t0
    assert out.returncode in (0, 1, 2), out.stderr
    report = json.loads(out.stdout)
    assert report["exit_code"] == out.returncode
    by = {c["id"]: c for c in report["checks"]}
    for cid in ("gpu.pcie", "gpu.clocks", "gpu.ecc", "topo.nvlink", "driver.version"):
        assert by[cid]["status"] == "skipped", cid
    assert by["host.shm"]["status"] != "skipped"
    assert by["host.nofile"]["status"] != "skipped"
    assert wall < 30.0  # a few seconds normally; generous for a loaded 2-core CI machine
    assert (tmp_path / "b" / "manifest.json").is_file()
    # replaying the bundle gives the same verdicts: one code path for live and offline
    again = json.loads(run("--json", "--from", str(tmp_path / "b")).stdout)
    assert [(c["id"], c["status"]) for c in again["checks"]] == [
        (c["id"], c["status"]) for c in report["checks"]
    ]


@pytest.mark.parametrize(("fixture", "code"), [("healthy_h100", 0), ("mig_on", 1), ("pcie_x8", 2)])
def test_exit_codes_over_bundles(fixture: str, code: int) -> None:
    out = run("--from", str(FIX / fixture), "--json")
    assert out.returncode == code, out.stderr
    assert json.loads(out.stdout)["exit_code"] == code


def test_human_report_names_the_fault_and_the_fix() -> None:
    out = run("--from", str(FIX / "ecc_errors"), env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 2
    assert "2 uncorrectable ECC error(s)" in out.stdout
    assert "fix:" in out.stdout
    assert "failures: 31 ok, 1 warn, 2 fail, 0 skipped (exit code 2)" in out.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--from", "/nonexistent/bundle"), "no such bundle folder"),
        (("--from", str(FIX)), "not a doctor bundle"),
        (("--from", str(FIX / "mig_on"), "--capture", "/tmp/x"), "cannot be combined"),
        (("--capture", str(FIX / "mig_on")), "exists and is not empty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], needle: str) -> None:
    out = run(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.stderr


def test_human_report_folds_identical_skips() -> None:
    out = run("--from", str(FIX / "cpu_host_recorded"), env={**os.environ, "COLUMNS": "250"})
    assert out.returncode == 1
    assert "gpu.* (9 checks)" in out.stdout
    assert "nvidia-smi: command not found" in out.stdout
    assert "warnings: 6 ok, 1 warn, 0 fail, 18 skipped (exit code 1)" in out.stdout
