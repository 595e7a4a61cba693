"""``simulate --sweep`` through the executor: the pool gives the serial figures, a rerun of the
same sweep resumes, a changed workload is simulated again, --ray/--workers need --sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process
from kvscope.tune.point import TIMING_KEYS

WL = [
    "--arrival",
    "poisson:rate=15",
    "--prompt-len",
    "300",
    "--output-len",
    "80",
    "--num-requests",
    "60",
]
SWEEP = ["--sweep", "max-num-seqs=4,64", "--json"]


def _rows(out: str) -> list[dict]:
    return [
        {k: v for k, v in r.items() if k not in (*TIMING_KEYS, "run_dir")} for r in json.loads(out)
    ]


def test_pool_serial_and_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    serial = tmp_path / "serial"
    code, out1, err = run_in_process(
        ["simulate", *WL, *SWEEP, "--workers", "1", "--out", str(serial), "--seed", "1"], capsys
    )
    assert code == 0, err
    code, out2, err = run_in_process(
        ["simulate", *WL, *SWEEP, "--workers", "2", "--out", str(tmp_path / "pool"), "--seed", "1"],
        capsys,
    )
    assert code == 0, err
    assert _rows(out1) == _rows(out2)
    rows = json.loads(out1)
    assert rows[0]["ttft_p99_s"] > rows[1]["ttft_p99_s"]  # 4 running requests queue the rest
    assert sorted(p.name for p in serial.iterdir()) == ["max-num-seqs=4", "max-num-seqs=64"]
    stamp = (serial / "max-num-seqs=4" / "summary.json").stat().st_mtime_ns
    code, out3, err = run_in_process(
        ["simulate", *WL, *SWEEP, "--workers", "1", "--out", str(serial), "--seed", "1"], capsys
    )
    assert code == 0, err
    assert _rows(out3) == _rows(out1)
    assert (serial / "max-num-seqs=4" / "summary.json").stat().st_mtime_ns == stamp
    # another workload under the same folder names: simulated again, not taken from disk
    code, _out4, err = run_in_process(
        ["simulate", *WL, *SWEEP, "--workers", "1", "--out", str(serial), "--seed", "2"], capsys
    )
    assert code == 0, err
    assert (serial / "max-num-seqs=4" / "summary.json").stat().st_mtime_ns != stamp


def test_executor_flags_need_a_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _o, err = run_in_process(["simulate", *WL, "--workers", "2"], capsys)
    one_error_line(code, err, "--sweep")
