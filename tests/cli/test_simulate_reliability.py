"""``kvscope simulate`` on hostile input and Ctrl-C, as a user runs it (issue #20).

Every bad input is exit 2 with one line on stderr and no traceback; an earlier run directory
is never overwritten without ``--force``; Ctrl-C leaves a run directory that says it was
interrupted (exit 130), with what the engine had served.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli_helpers import one_error_line_of, run_kvscope
from kvscope.workload import build_workload


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_kvscope("simulate", *args, cwd=cwd, timeout=120)


WL = ("--arrival", "poisson:rate=20", "--num-requests", "30", "--seed", "3")


def _bench_like_run(d: Path) -> dict[str, object]:
    d.mkdir(parents=True)
    doc = {"kind": "bench", "config": {}, "completed": 97}
    (d / "summary.json").write_text(json.dumps(doc))
    (d / "requests.parquet").write_bytes(b"measured rows stand-in")
    return doc


@pytest.mark.parametrize(
    "content",
    [b"garbage bytes, not parquet", b"PAR1" + bytes(range(200)) + b"PAR1", "truncated", "cols"],
)
def test_calibrate_on_a_corrupt_requests_table(tmp_path: Path, content: object) -> None:
    run_dir = tmp_path / "bench"
    run_dir.mkdir()
    f = run_dir / "requests.parquet"
    if content == "truncated":
        assert run(*WL, "--out", str(tmp_path / "real")).returncode == 0
        f.write_bytes((tmp_path / "real" / "requests.parquet").read_bytes()[:400])
    elif content == "cols":
        pq.write_table(pa.table({"x": [1, 2, 3]}), f)
    else:
        assert isinstance(content, bytes)
        f.write_bytes(content)
    line = one_error_line_of(run("--calibrate", str(run_dir)))
    assert str(f) in line
    assert sorted(p.name for p in run_dir.iterdir()) == ["requests.parquet"]  # nothing written


def test_out_refuses_an_earlier_run_before_simulating(tmp_path: Path) -> None:
    d = tmp_path / "precious"
    before = _bench_like_run(d)
    start = time.monotonic()
    line = one_error_line_of(
        run("--arrival", "poisson:rate=50", "--num-requests", "2000000", "--out", str(d))
    )
    assert "already exists" in line and "--force" in line
    assert time.monotonic() - start < 30  # refused at the start, not after simulating
    assert json.loads((d / "summary.json").read_text()) == before
    assert (d / "requests.parquet").read_bytes() == b"measured rows stand-in"


def test_force_replaces_the_earlier_run(tmp_path: Path) -> None:
    d = tmp_path / "precious"
    _bench_like_run(d)
    out = run(*WL, "--out", str(d), "--force", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads((d / "summary.json").read_text())["kind"] == "simulate"
    assert pq.read_table(d / "requests.parquet").num_rows == 30


def test_sweep_writes_points_under_a_fresh_out(tmp_path: Path) -> None:
    d = tmp_path / "sweep"
    _bench_like_run(d)
    one_error_line_of(run(*WL, "--sweep", "block-size=16,32", "--out", str(d)))
    out = run(*WL, "--sweep", "block-size=16,32", "--out", str(d), "--force", "--json")
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in d.iterdir()) == ["block-size=16", "block-size=32"]


def test_a_bad_sweep_point_fails_before_any_point_runs(tmp_path: Path) -> None:
    d = tmp_path / "sweep"
    line = one_error_line_of(run(*WL, "--sweep", "gpu-memory-utilization=0.9,nan", "--out", str(d)))
    assert "--gpu-memory-utilization" in line
    assert not d.exists()


def test_calibrate_out_is_checked_and_not_overwritten(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    out = run(
        "--arrival", "poisson:rate=8", "--num-requests", "200", "--seed", "1", "--out", str(bench)
    )
    assert out.returncode == 0, out.stderr
    before = sorted(p.name for p in bench.iterdir())
    # without --out the measured run directory is not written into
    fit = run("--calibrate", str(bench), "--json")
    assert fit.returncode == 0, fit.stderr
    assert json.loads(fit.stdout)["out"] is None
    assert sorted(p.name for p in bench.iterdir()) == before
    # --out is a run directory, as for every command: the fit goes to OUT/cost.json
    calib = tmp_path / "calib"
    done = run("--calibrate", str(bench), "--out", str(calib))
    assert done.returncode == 0, done.stderr
    cost = calib / "cost.json"
    assert f"wrote {cost}" in " ".join(done.stdout.split())
    assert json.loads(cost.read_text())["source"].startswith("fitted")
    cost.write_text("{}")
    assert "already exists" in one_error_line_of(
        run("--calibrate", str(bench), "--out", str(calib))
    )
    assert cost.read_text() == "{}"
    assert run("--calibrate", str(bench), "--out", str(calib), "--force").returncode == 0
    assert json.loads(cost.read_text())["source"].startswith("fitted")
    used = run(*WL, "--cost", str(cost), "--json")
    assert used.returncode == 0, used.stderr
    one_error_line_of(run("--calibrate", str(bench), "--out", str(tmp_path)))  # holds other runs
    # the old spelling, --out FILE.json, is told where the file goes now, and nothing is written
    line = one_error_line_of(run("--calibrate", str(bench), "--out", str(tmp_path / "c.json")))
    assert "--out is a run directory" in line and "cost.json" in line
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("--max-model-len", "2000000000"),  # fits int32, not the GPU: plan refuses it too
        ("--max-model-len", "1000000000000"),
        ("--slo-ttft-s", "-1"),
        ("--cpu-offload-gib", "1e300"),
        ("--sweep", "enable-prefix-caching=maybe"),
        ("--cost", "/nonexistent/cost.json"),
    ],
)
def test_bad_values_are_one_line(args: tuple[str, ...]) -> None:
    one_error_line_of(run(*WL, *args))


def test_ctrl_c_leaves_an_interrupted_run_directory(tmp_path: Path) -> None:
    # A stream the step-mode engine needs tens of seconds for; SIGINT comes after a few.
    wl = tmp_path / "w.parquet"
    build_workload(arrival="poisson:rate=500", num_requests=100_000, seed=1).save(wl)
    d = tmp_path / "run"
    argv = ["simulate", "--workload", str(wl), "--mode", "step", "--out", str(d), "--json"]
    p = subprocess.Popen(
        [sys.executable, "-m", "kvscope.cli.main", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(5)
    assert p.poll() is None, "the simulation ended before it could be interrupted"
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvscope: interrupted"), err
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["kind"] == "simulate"
    assert summary["config"]["mode"] == "step"
    if "requests" in summary:  # the engine had started: what it served is kept
        table = pq.read_table(d / "requests.parquet")
        assert table.num_rows == summary["requests"] == 100_000
        assert table.column("status").to_pylist().count("ok") == summary["completed"]
        assert (d / "steps.parquet").is_file()


def test_a_uri_like_out_is_a_local_directory(tmp_path: Path) -> None:
    out = run(*WL, "--out", "file:/run", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "file:" / "run" / "summary.json").is_file()
    assert not Path("/run/summary.json").exists()


def test_a_name_too_long_is_one_line(tmp_path: Path) -> None:
    long = str(tmp_path / ("x" * 300))
    one_error_line_of(run(*WL, "--out", long))
    one_error_line_of(run("--calibrate", long))
