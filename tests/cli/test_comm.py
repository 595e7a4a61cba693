"""``kvscope comm`` as a user runs it: real ranks, real exit codes.

Most commands run in-process through the console-script entry (``main``), which forks its
ranks from the test process and so pays for importing torch once; a real subprocess covers
the missing-torch path, a dead rank end to end and bad input.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")


def run(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = (
        [sys.executable, "-c", code, *args]
        if code
        else [sys.executable, "-m", "kvscope.cli.main", *args]
    )
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``kvscope ARGS`` in this process; the result looks like a subprocess's."""
    from kvscope.cli.main import main

    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, captured.out, captured.err)


def one_line(out: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


@pytest.mark.integration
def test_bench_json_and_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = cli(
        capsys,
        "comm",
        "bench",
        "--world-size",
        "2",
        "--sizes",
        "1K:16K:x4",
        "--iters",
        "3",
        "--json",
        "--out",
        str(tmp_path),
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["kind"] == "comm" and doc["config"]["op"] == "all_reduce"
    assert [r["size_bytes"] for r in doc["rows"]] == [1024, 4096, 16384]
    assert json.loads((tmp_path / "summary.json").read_text())["rows"] == doc["rows"]
    assert (tmp_path / "comm.parquet").is_file()


@pytest.mark.integration
def test_bench_table(capsys: pytest.CaptureFixture[str]) -> None:
    out = cli(
        capsys,
        "comm",
        "bench",
        "--op",
        "all_to_all",
        "-n",
        "4",
        "--sizes",
        "4K,64K",
        "--iters",
        "3",
    )
    assert out.returncode == 0, out.stderr
    assert "all_to_all on 4 ranks" in out.stdout
    assert "64K" in out.stdout and "link fit" in out.stdout
    # 4 gloo ranks on fewer cores: the run says the tail includes waiting for a core
    assert ("4 gloo ranks on" in out.stderr) == ((os.cpu_count() or 1) < 4)


@pytest.mark.integration
def test_moe_json(capsys: pytest.CaptureFixture[str]) -> None:
    out = cli(
        capsys,
        "comm",
        "moe",
        "--skew",
        "0,1.5",
        "--tokens",
        "16",
        "--hidden",
        "64",
        "--iters",
        "4",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [r["skew"] for r in doc["rows"]] == [0.0, 1.5]


@pytest.mark.integration
def test_dead_rank_exits_3_with_one_line_quickly() -> None:
    t0 = time.monotonic()
    out = run(
        "comm", "bench", "-n", "4", "--sizes", "1K,2K", "--iters", "2", "--inject-fault", "3:exit@1"
    )
    assert out.returncode == 3
    assert "rank 3 exited with code 17" in one_line(out)
    # well under the 60 s default stall timeout: the death itself ended the run (most of
    # this is the subprocess importing torch on a loaded 2-core host)
    assert time.monotonic() - t0 < 45


@pytest.mark.integration
def test_hung_rank_exits_3_after_the_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    out = cli(
        capsys,
        "comm",
        "bench",
        "-n",
        "2",
        "--sizes",
        "1K",
        "--iters",
        "2",
        "--timeout",
        "3",
        "--inject-fault",
        "0:hang",
    )
    assert out.returncode == 3
    assert "rank 0 stopped making progress" in one_line(out)


def test_without_torch_one_line_says_install_the_extra() -> None:
    # sys.modules["torch"] = None makes every "import torch" raise ImportError, as on a
    # host where the extra is not installed.
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from kvscope.cli.main import main; main(sys.argv[1:])\n"
    )
    out = run("comm", "bench", "--sizes", "1K", code=code)
    assert out.returncode == 2
    assert out.stdout == ""
    assert "install the torch extra" in one_line(out)


def test_nccl_without_gpu_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    out = cli(capsys, "comm", "bench", "--backend", "nccl", "--sizes", "1K")
    assert out.returncode == 2
    assert "--backend nccl needs CUDA GPUs" in one_line(out)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("comm", "bench", "--sizes", "64M:1K:x2"), "ends"),
        (("comm", "bench", "--op", "allreduse"), "unknown collective 'allreduse'"),
        (("comm", "bench", "--backend", "mpi"), "unknown backend 'mpi'"),
        (("comm", "moe", "--experts", "6", "-n", "4"), "split evenly"),
        (("comm", "moe", "--skew", "a,b"), "cannot read --skew"),
    ],
)
def test_bad_input(args: tuple[str, ...], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = cli(capsys, *args)
    assert out.returncode == 2
    assert needle in one_line(out)
