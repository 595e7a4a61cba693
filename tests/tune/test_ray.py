"""``tune --ray`` on a real local Ray cluster: a worker killed mid-task is retried by Ray,
every point still arrives, and the table is the local pool's.

The cluster is ``ray start --head`` on 127.0.0.1 with 2 CPUs in its own temporary folder;
teardown ends the processes of that cluster only (those whose command line names its
folder, and their children), never other Ray sessions on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import run_in_process

pytestmark = [pytest.mark.slow, pytest.mark.integration]
SRC = Path(__file__).resolve().parents[2] / "src"
SPACE = (
    "tp: [1, 2]\ndp: [1, 2]\nkv_cache_dtype: [auto, fp8]\nmax_num_seqs: [null]\n"
    "max_num_batched_tokens: [null, 2048]\n"
)
ARGS = [
    "--arrival",
    "poisson:rate=40",
    "--prompt-len",
    "lognormal:median=600,sigma=0.7",
    "--output-len",
    "150",
    "--num-requests",
    "600",
    "--seed",
    "5",
    "--max-gpus",
    "4",
    "--slo",
    "ttft_p99=0.5,tpot_p99=50ms",
    "--eta",
    "1",
    "--json",
]


def _procs() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[int(d.name)] = (ppid, cmd)
    return out


def _stop_cluster(temp_dir: str) -> None:
    procs = _procs()
    mine = {pid for pid, (_pp, cmd) in procs.items() if temp_dir in cmd}
    grown = True
    while grown:  # and their children (the workers)
        more = {pid for pid, (pp, _c) in procs.items() if pp in mine} - mine
        grown = bool(more)
        mine |= more
    mine.discard(os.getpid())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in mine:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        time.sleep(1.0)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[tuple[str, dict[str, str]]]:
    pytest.importorskip("ray")
    ray_bin = Path(sys.executable).parent / "ray"
    if not ray_bin.exists():
        pytest.skip("the ray command is not installed beside this interpreter")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp_dir = tempfile.mkdtemp(prefix="kvray")  # short: Ray's socket paths must fit
    env = {
        **os.environ,
        "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    cmd = [
        str(ray_bin),
        "start",
        "--head",
        "--node-ip-address",
        "127.0.0.1",
        "--num-cpus",
        "2",
        "--port",
        str(port),
        "--disable-usage-stats",
        "--include-dashboard=false",
        "--temp-dir",
        temp_dir,
    ]
    try:
        started = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr[-2000:]
        yield f"127.0.0.1:{port}", env
    finally:
        _stop_cluster(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _running_point_worker() -> int | None:
    for pid, (_pp, cmd) in _procs().items():
        if cmd.startswith("ray::kvscope_point"):
            return pid
    return None


def test_a_killed_worker_loses_no_point_and_the_table_is_the_pools(
    ray_cluster: tuple[str, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address, env = ray_cluster
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    out = tmp_path / "ray"
    argv = [
        sys.executable,
        "-m",
        "kvscope.cli.main",
        "tune",
        *ARGS,
        "--space",
        str(space),
        "--ray",
        address,
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    killed = None
    deadline = time.monotonic() + 60
    while killed is None and proc.poll() is None and time.monotonic() < deadline:
        pid = _running_point_worker()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            killed = pid
        time.sleep(0.005)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-3000:]
    assert killed is not None, "no worker was caught running a point"
    assert stdout.lstrip().startswith("{"), (stdout[:300], stderr[-1500:])
    doc = json.loads(stdout)
    ranked = doc["ranked"]
    assert len(ranked) == 16 and all(r["status"] == "ok" for r in ranked)
    for r in ranked:
        assert (out / r["run_dir"] / "summary.json").is_file()
        assert (out / r["run_dir"] / "requests.parquet").is_file()
    assert not list((out / "points").glob(".*.tmp"))
    # the same arguments on the local pool: the same table
    local = ["tune", *ARGS, "--space", str(space), "--workers", "2", "--out", str(tmp_path / "l")]
    code, lout, lerr = run_in_process(local, capsys)
    assert code == 0, lerr
    assert lout.lstrip().startswith("{"), (lout[:300], lerr[-800:])
    assert json.loads(lout)["ranked"] == ranked


def test_simulate_sweep_on_ray_matches_this_process(
    ray_cluster: tuple[str, dict[str, str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address, env = ray_cluster
    wl = [
        "--arrival",
        "poisson:rate=15",
        "--prompt-len",
        "300",
        "--output-len",
        "80",
        "--num-requests",
        "60",
        "--sweep",
        "max-num-seqs=4,64",
        "--json",
    ]
    ray_run = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvscope.cli.main",
            "simulate",
            *wl,
            "--ray",
            address,
            "--out",
            str(tmp_path / "ray"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert ray_run.returncode == 0, ray_run.stderr[-2000:]
    code, out, err = run_in_process(
        ["simulate", *wl, "--workers", "1", "--out", str(tmp_path / "here")], capsys
    )
    assert code == 0, err
    drop = ("wall_s", "cpu_s", "speedup_vs_real_time", "run_dir")
    rows = [{k: v for k, v in r.items() if k not in drop} for r in json.loads(out)]
    assert [
        {k: v for k, v in r.items() if k not in drop} for r in json.loads(ray_run.stdout)
    ] == rows
