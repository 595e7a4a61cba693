"""A measured link from `kvscope comm bench` feeds `kvscope plan --comm-run`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def test_not_a_comm_run_is_one_line(tmp_path: Path) -> None:
    out = _plan("--comm-run", str(tmp_path))
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1
    assert "comm bench" in out.stderr
