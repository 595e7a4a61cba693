"""``kvscope simulate`` as a user runs it: run directories, --json, sweeps, one-line errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq

from cli_helpers import run_kvscope
from kvscope.results import REQUEST_COLUMNS, read_summary


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_kvscope("simulate", *args, timeout=120)


WL = ("--arrival", "poisson:rate=20", "--num-requests", "200", "--seed", "3")


def test_run_dir_and_json(tmp_path: Path) -> None:
    out = run(*WL, "--out", str(tmp_path / "r"), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["completed"] == 200 and doc["rejected"] == 0
    req = pq.read_table(tmp_path / "r" / "requests.parquet")
    assert tuple(req.column_names) == REQUEST_COLUMNS and req.num_rows == 200
    steps = pq.read_table(tmp_path / "r" / "steps.parquet")
    assert steps.column_names[0] == "t_s" and steps.num_rows > 10
    summary = read_summary(tmp_path / "r")
    assert summary is not None and summary["kind"] == "simulate"
    assert summary["config"]["pool"]["max_num_seqs"] >= 256  # the engine default via the planner


def test_sweep_writes_one_run_dir_per_point(tmp_path: Path) -> None:
    out = run(*WL, "--sweep", "block-size=16,64", "--out", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["point"] for r in rows] == ["block-size=16", "block-size=64"]
    assert (tmp_path / "block-size=64" / "summary.json").is_file()
    # larger blocks leave more of the last block empty
    assert rows[1]["internal_waste_tokens_mean"] > rows[0]["internal_waste_tokens_mean"]


def test_bad_input_is_one_line_exit_2() -> None:
    for args in (
        ("--num-gpu-blocks-override", "0", *WL),
        ("--sweep", "block-size", *WL),
        ("--sweep", "nonsense=1", *WL),
        ("--allocator", "buddy", *WL),
    ):
        out = run(*args)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
